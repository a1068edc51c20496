"""`rlxf init-model`: a fresh Qwen2-architecture model and tokenizer from a size preset, offline."""

from __future__ import annotations

import time
from pathlib import Path

from rlxf.cli.errors import UsageError


def run(out: Path, preset: str = "tiny", seed: int = 0, overwrite: bool = False) -> None:
    from rlxf.models.factory import init_model
    from rlxf.models.loading import read_init_info
    from rlxf.models.presets import PRESETS

    if preset not in PRESETS:
        raise UsageError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one summary line instead of a shard-writing bar
    start = time.perf_counter()
    try:
        path = init_model(preset, out, seed=seed, overwrite=overwrite)
    except FileExistsError as e:
        raise UsageError(str(e)) from None
    except OSError as e:  # a read-only directory, a file where a directory must be, a full disk
        where = Path(e.filename).resolve() if e.filename else out.resolve()
        raise UsageError(f"init-model: cannot write the model to {out.resolve()} ({e.strerror or type(e).__name__}: "
                         f"{where}); give a directory you can write to") from None
    info = read_init_info(path) or {}
    print(
        f"wrote {info.get('architecture', 'model')} preset={preset} seed={seed} "
        f"parameters={info.get('parameters', 0):,} vocab={info.get('vocab_size', 0)} to {path} "
        f"in {time.perf_counter() - start:.1f}s"
    )


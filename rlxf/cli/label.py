"""`rlxf label CONFIG [OVERRIDES] [--overwrite]`"""

from __future__ import annotations

from pathlib import Path


def run(config: Path, overrides: list[str], *, overwrite: bool) -> None:
    from rlxf.cli.preflight import check_inputs
    from rlxf.cli.train import apply_threads, discard_on_failed_start, open_run_dir
    from rlxf.config.load import load_config_located
    from rlxf.run_dir import setup_logging

    cfg, origins = load_config_located(config, overrides)
    run_dir = open_run_dir(cfg, "label", lambda: check_inputs(cfg, origins=origins), overwrite=overwrite,
                           resumable=False)
    setup_logging(run_dir.log)
    apply_threads(cfg.run.threads)

    from rlxf.trainer.label import run_label

    with discard_on_failed_start(run_dir, fresh=True):
        run_label(cfg, run_dir)

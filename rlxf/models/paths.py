"""Where a model lives: one rule for every command (issue 17.9).

Every run writes its models the same way, SFT and RL alike::

    runs/<name>/checkpoints/step_N/model/     config.json + weights + tokenizer (HF format)

and every command that takes a model (``model.path``, ``rlxf generate``, ``rlxf eval
--checkpoint``, the Python API) accepts any of the three directories on that path:

- a **model directory** (holds ``config.json``): used as it is;
- a **checkpoint directory** (holds ``model/config.json``): its ``model/``;
- a **run directory** (holds ``checkpoints/step_N/model/``): the newest checkpoint's model.

Anything else that exists locally is an error that names the three forms; a name that does not
exist locally is left alone (a Hugging Face hub id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MODEL_SUBDIR = "model"
CHECKPOINTS_SUBDIR = "checkpoints"
_STEP = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class ModelLocation:
    """A resolved model directory and, when it belongs to one, its run and checkpoint step."""

    model: Path          # the directory holding config.json
    run: Path | None     # runs/<name>/ it was saved by, if any
    step: int | None     # the checkpoint's step, if it is a checkpoint's model


class ModelPathError(ValueError):
    """A local directory that holds no model in any of the accepted layouts."""


ADAPTER_CONFIG = "adapter_config.json"   # what PEFT's save_pretrained writes for a LoRA adapter
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model")


def lora_adapter_message(path: Path) -> str:
    """Why a PEFT adapter directory is refused, and the two ways on: merge it into its base
    model, or train adapters of one's own on the base model (``model.lora``)."""
    import json  # noqa: PLC0415 - only for this message

    try:
        base = json.loads((path / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        base = None
    base_text = f"its base model is {base!r}" if base else "its base model is not named in it"
    merged = f"{path}-merged"
    return (
        f"{path} is a LoRA adapter ({ADAPTER_CONFIG}, PEFT), not a whole model: {base_text}. rlxf loads "
        f"whole models (config.json + weights). Merge the adapter into its base first:\n"
        f"  python -c \"from peft import AutoPeftModelForCausalLM as M; from transformers import AutoTokenizer as T; "
        f"m = M.from_pretrained('{path}'); m.merge_and_unload().save_pretrained('{merged}'); "
        f"T.from_pretrained(m.peft_config['default'].base_model_name_or_path).save_pretrained('{merged}')\"\n"
        f"and give {merged}. To train LoRA adapters yourself, set model.path to the base model and model.lora.r > 0. "
        f"(A training config's model.path and rlxf.models.load_model take the adapter directory as it is: they "
        f"merge it into its base as they load it.)")


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def _step(path: Path) -> int | None:
    m = _STEP.match(path.name)
    return int(m.group(1)) if m else None


def _owner(checkpoint: Path) -> tuple[Path | None, int | None]:
    """(run dir, step) of ``.../checkpoints/step_N``; (None, None) for a loose directory."""
    step = _step(checkpoint)
    if step is None or checkpoint.parent.name != CHECKPOINTS_SUBDIR:
        return None, None
    return checkpoint.parent.parent, step


def newest_checkpoint_model(run: Path) -> tuple[int, Path] | None:
    """(step, model dir) of the newest checkpoint under ``run/checkpoints`` that holds a model."""
    root = run / CHECKPOINTS_SUBDIR
    if not root.is_dir():
        return None
    found = [(s, p / MODEL_SUBDIR) for p in root.iterdir()
             if (s := _step(p)) is not None and _is_model_dir(p / MODEL_SUBDIR)]
    return max(found) if found else None


def resolve_model_dir(path: str | Path) -> ModelLocation:
    """The model directory that ``path`` (a model, checkpoint or run directory) stands for.

    Raises :class:`ModelPathError` when ``path`` is a directory in none of those layouts.
    """
    path = Path(path).expanduser()
    if _is_model_dir(path):
        if path.name == MODEL_SUBDIR:
            run, step = _owner(path.parent)
            return ModelLocation(path, run, step)
        return ModelLocation(path, None, None)
    if _is_model_dir(path / MODEL_SUBDIR):
        run, step = _owner(path)
        return ModelLocation(path / MODEL_SUBDIR, run, step)
    newest = newest_checkpoint_model(path)
    if newest is not None:
        return ModelLocation(newest[1], path, newest[0])
    if (path / ADAPTER_CONFIG).is_file():
        raise ModelPathError(lora_adapter_message(path))
    if (path / CHECKPOINTS_SUBDIR).is_dir():
        raise ModelPathError(
            f"{path} is a run directory without any saved model yet (nothing in "
            f"{path / CHECKPOINTS_SUBDIR}/step_N/model). Wait for its first checkpoint "
            "(checkpoint.every) or give a model directory.")
    raise ModelPathError(
        f"{path} holds no model.{_partial_model(path)} Give a model directory (with config.json), a checkpoint "
        f"directory (with model/config.json, e.g. runs/NAME/checkpoints/step_200) or a run "
        f"directory (with checkpoints/step_N/model, e.g. runs/NAME).")


def _partial_model(path: Path) -> str:
    """What part of a model ``path`` holds without its config.json (weights, or a tokenizer only:
    a copy or download that left files out), said in a sentence; "" when neither."""
    try:
        files = sorted(p.name for p in path.iterdir() if p.is_file())
    except OSError:
        return ""
    weights = [f for f in files if f.endswith((".safetensors", ".bin"))]
    if weights:
        return (f" It holds weights ({', '.join(weights[:3])}{', ...' if len(weights) > 3 else ''}) but not the "
                f"config.json that says which model they are for: copy the model's config.json next to them.")
    tokenizer = [f for f in files if f in TOKENIZER_FILES]
    if tokenizer:
        return (f" It holds only a tokenizer ({', '.join(tokenizer)}), no config.json or weights (a training "
                f"config may name it as model.tokenizer, next to the model's own directory as model.path).")
    return ""

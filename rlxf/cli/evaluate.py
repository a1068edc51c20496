"""`rlxf eval CONFIG [OVERRIDES] [--checkpoint PATH]`: held-out accuracy of a model, printed and,
when the model belongs to a run, appended to that run's ``eval.jsonl``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rlxf.cli.commands import path_override
from rlxf.cli.errors import UsageError


def _location(path: Path | str):
    """Where the model is (``rlxf.models.paths``): a model, checkpoint or run directory."""
    from rlxf.models.paths import ModelPathError, resolve_model_dir

    if not Path(path).expanduser().exists():
        raise UsageError(f"{path} does not exist; give a run directory (runs/NAME), a checkpoint directory "
                         f"(runs/NAME/checkpoints/step_N) or a model directory")
    try:
        return resolve_model_dir(path)
    except ModelPathError as e:
        raise UsageError(str(e)) from None


def _save(location, record: dict) -> Path | None:
    """Append ``record`` to ``<run>/eval.jsonl`` when the model belongs to a run directory."""
    if location is None or location.run is None:
        return None
    from rlxf.metrics.sinks import JsonlWriter

    out = location.run / "eval.jsonl"
    try:
        writer = JsonlWriter(out)
        try:
            writer.write(record)
        finally:
            writer.close()
    except OSError as e:  # a run directory of another user's, read-only media, a full disk
        raise UsageError(f"the results above were not appended to {out} ({e.strerror or type(e).__name__}); "
                         f"make {location.run} writable (or free space there) and run `rlxf eval` again") from None
    return out


def _note_format_change(location, data, config: Path) -> None:
    """Say so when the run that trained the model formatted its prompts otherwise than ``config``
    does (chat template on or off, another system prompt): a model trained on raw ``3+4=`` scores
    near 0 on the templated prompts, and that number would be appended to the run's eval.jsonl
    as the model's accuracy."""
    from rlxf.cli.generate import trained_data

    trained, saved = trained_data(str(location.model))
    if trained is None:
        return
    fields = ("apply_chat_template", "system_prompt")
    differ = [f for f in fields if getattr(trained, f) != getattr(data, f)]
    if differ:
        what = "; ".join(f"data.{f} is {getattr(data, f)!r} here, {getattr(trained, f)!r} in {saved}" for f in differ)
        fix = " ".join(f"data.{f}={json.dumps(getattr(trained, f))}" for f in differ)  # YAML reads JSON
        print(f"note: {config} formats prompts otherwise than the model's run trained on them ({what}); to "
              f"measure the model on the prompts it learned from, add {fix}", file=sys.stderr)


def run(config: Path, overrides: list[str], *, checkpoint: Path | None) -> None:
    from rlxf.config import load_config

    if checkpoint is not None:
        location = _location(checkpoint)
        overrides = [*overrides, path_override("model.path", location.model)]
    cfg = load_config(config, overrides)
    if checkpoint is None:
        local = Path(cfg.model.path).expanduser()
        location = _location(local) if local.exists() else None  # else a hub id
    if location is not None:
        _note_format_change(location, cfg.data, config)

    from rlxf.data import build_prompt_data
    from rlxf.models import load_from_config
    from rlxf.models.loading import tokenizer_from_config
    from rlxf.rewards import build_run_reward
    from rlxf.rollout import SamplingParams, build_engine_from_config
    from rlxf.trainer.evaluate import NoHeldOutPrompts, evaluate_prompts, held_out_prompts, no_held_out_hint

    # the held-out prompts first (they need only the tokenizer): with none there is nothing to
    # measure, so refuse before loading the weights rather than append a 0% row to eval.jsonl
    data = build_prompt_data(cfg.data, tokenizer_from_config(cfg.model), seed=cfg.seeds.data)
    prompts = held_out_prompts(data.test, cfg.eval.num_problems)
    if not prompts:
        raise NoHeldOutPrompts(f"rlxf eval: {no_held_out_hint(cfg.data)}")
    model, tokenizer = load_from_config(cfg.model)
    engine = build_engine_from_config(cfg.rollout, model, tokenizer, seed=cfg.seeds.sampling)
    reward = build_run_reward(cfg)
    sampling = SamplingParams.from_config(cfg.rollout)
    if cfg.eval.max_new_tokens is not None:
        sampling = SamplingParams.from_config(cfg.rollout, max_new_tokens=cfg.eval.max_new_tokens)
    try:
        metrics = evaluate_prompts(engine, tokenizer, reward, prompts, sampling, pass_k=cfg.eval.pass_k,
                                   seed=cfg.seeds.sampling, reward_cfg=cfg.reward)
    finally:
        close = getattr(reward, "close", None)
        if close is not None:
            close()
    record = {"model": cfg.model.path, **metrics}
    if location is not None and location.step is not None:
        record = {"model": cfg.model.path, "step": location.step, **metrics}
    print(json.dumps(record, indent=2))
    saved = _save(location, {**record, "time": time.time()})
    where = f"appended to {saved}" if saved else "not saved: the model is not in a run directory"
    print(f"eval results {where}", file=sys.stderr)

"""`rlxf eval CONFIG [OVERRIDES] [--checkpoint PATH]`"""

from __future__ import annotations

import json
from pathlib import Path

from rlxf.cli.errors import UsageError


def resolve_model_dir(checkpoint: Path) -> Path:
    """A checkpoint directory (``step_N/``, holding ``model/``) or a model directory itself."""
    if (checkpoint / "model" / "config.json").exists():
        return checkpoint / "model"
    if (checkpoint / "config.json").exists():
        return checkpoint
    raise UsageError(f"--checkpoint {checkpoint}: neither a checkpoint (with model/) nor a model directory")


def run(config: Path, overrides: list[str], *, checkpoint: Path | None) -> None:
    from rlxf.config import load_config

    if checkpoint is not None:
        overrides = [*overrides, f"model.path={resolve_model_dir(checkpoint)}"]
    cfg = load_config(config, overrides)

    from rlxf.data import build_prompt_data
    from rlxf.models import load_from_config
    from rlxf.rewards import build_reward
    from rlxf.rollout import SamplingParams, build_engine_from_config
    from rlxf.trainer.evaluate import evaluate_prompts

    model, tokenizer = load_from_config(cfg.model)
    engine = build_engine_from_config(cfg.rollout, model, tokenizer, seed=cfg.seeds.sampling)
    data = build_prompt_data(cfg.data, tokenizer, seed=cfg.seeds.data)
    reward = build_reward(cfg.reward)
    sampling = SamplingParams.from_config(cfg.rollout)
    if cfg.eval.max_new_tokens is not None:
        sampling = SamplingParams.from_config(cfg.rollout, max_new_tokens=cfg.eval.max_new_tokens)
    try:
        metrics = evaluate_prompts(engine, tokenizer, reward, data.test[: cfg.eval.num_problems], sampling,
                                   pass_k=cfg.eval.pass_k, seed=cfg.seeds.sampling)
    finally:
        close = getattr(reward, "close", None)
        if close is not None:
            close()
    print(json.dumps({"model": cfg.model.path, **metrics}, indent=2))

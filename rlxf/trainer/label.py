"""`rlxf label`: preference pairs labelled by a machine (RLAIF, Bai et al. 2022; Lee et al. 2023).

For each prompt the policy samples k responses; the reward (a rule verifier, the LLM judge,
a reward model, or a weighted mix of them) scores each, and the best and the worst become a
(chosen, rejected) pair, written as JSONL that `rlxf rm` and `rlxf dpo` read:

    {"prompt": ..., "chosen": ..., "rejected": ..., "chosen_score": ..., "rejected_score": ..., "uid": ...}

``prompt`` is the prompt text with the chat template already applied, exactly what the policy
saw and what the ``reward_model`` verifier is later given, so read these files with
``data.apply_chat_template: false``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

from rlxf.config import Config
from rlxf.config.preference import LabelConfig
from rlxf.errors import UserInputError
from rlxf.rollout import SamplingParams
from rlxf.run_dir import RunDir
from rlxf.trainer.collect import Rollout
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt, Trajectory

log = logging.getLogger("rlxf")


def best_and_worst(group: list[Trajectory]) -> tuple[Trajectory, Trajectory]:
    """The highest- and lowest-rewarded samples of one prompt (the first of equals)."""
    best = max(range(len(group)), key=lambda i: (group[i].reward, -i))
    worst = min(range(len(group)), key=lambda i: (group[i].reward, i))
    return group[best], group[worst]


def label_prompts(rollout: Rollout, prompts: list[Prompt], sampling: SamplingParams, cfg: LabelConfig, *,
                  seed: int) -> tuple[list[dict], dict[str, float]]:
    """Pairs for ``prompts`` (one per prompt whose scores differ by more than ``cfg.min_gap``)
    and counts: prompts, pairs, ties dropped, mean best-worst gap."""
    sampling = replace(sampling, n=cfg.k)
    pairs: list[dict] = []
    ties = 0
    for start in range(0, len(prompts), cfg.batch_prompts):
        chunk = prompts[start:start + cfg.batch_prompts]
        trajs = rollout.generate(chunk, [derive_seed(seed, start + i) for i in range(len(chunk))], sampling)
        rollout.score(trajs, sampling.max_new_tokens)
        groups: dict[int, list[Trajectory]] = {}
        for t in trajs:
            groups.setdefault(t.group, []).append(t)
        for group in groups.values():
            chosen, rejected = best_and_worst(group)
            if chosen.reward - rejected.reward <= cfg.min_gap:
                ties += 1
                continue
            pairs.append({"prompt": chosen.prompt.prompt_text, "chosen": chosen.response_text,
                          "rejected": rejected.response_text, "chosen_score": chosen.reward,
                          "rejected_score": rejected.reward, "uid": chosen.prompt.uid})
    gap = sum(p["chosen_score"] - p["rejected_score"] for p in pairs) / max(1, len(pairs))
    return pairs, {"prompts": float(len(prompts)), "pairs": float(len(pairs)), "ties": float(ties), "gap_mean": gap}


def write_pairs(path: Path, pairs: list[dict]) -> None:
    with open(path, "w") as f:
        for p in pairs:
            f.write(json.dumps(p) + "\n")


def run_label(cfg: Config, run: RunDir) -> dict[str, dict[str, float]]:
    """``rlxf label``: writes ``<run>/pairs_train.jsonl`` (and ``pairs_test.jsonl``); returns
    each split's counts."""
    from rlxf.config import dump_config
    from rlxf.data import build_prompt_data
    from rlxf.models import load_from_config
    from rlxf.rewards import build_run_reward
    from rlxf.rollout import build_engine_from_config
    from rlxf.trainer.collect import EngineRollout

    if cfg.rollout.temperature <= 0:
        raise UserInputError(f"rlxf label: rollout.temperature={cfg.rollout.temperature} makes the k samples of a "
                         f"prompt identical; set rollout.temperature > 0 (e.g. 1.0)")
    run.config.write_text(dump_config(cfg))
    model, tokenizer = load_from_config(cfg.model.model_copy(update={"lora": None}))
    data = build_prompt_data(cfg.data, tokenizer, seed=cfg.seeds.data)
    engine = build_engine_from_config(cfg.rollout, model, tokenizer, seed=cfg.seeds.sampling)
    reward = build_run_reward(cfg)
    sampling = SamplingParams.from_config(cfg.rollout)
    out: dict[str, dict[str, float]] = {}
    try:
        rollout = EngineRollout(engine, tokenizer, reward)
        for split, prompts, seed in (("train", data.train[: cfg.label.num_prompts], cfg.seeds.sampling),
                                     ("test", data.test[: cfg.label.test_prompts], cfg.seeds.sampling + 1)):
            if not prompts:
                continue
            pairs, counts = label_prompts(rollout, prompts, sampling, cfg.label, seed=seed)
            write_pairs(run.path / f"pairs_{split}.jsonl", pairs)
            log.info("label %s: %d pairs from %d prompts (%d ties dropped), mean score gap %.3g -> %s", split,
                     len(pairs), len(prompts), counts["ties"], counts["gap_mean"], run.path / f"pairs_{split}.jsonl")
            out[split] = counts
    finally:
        reward.close()
    (run.path / "label_summary.json").write_text(json.dumps(out, indent=1) + "\n")
    return out

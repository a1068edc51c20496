"""`rlxf label`: preference pairs labelled by a machine (RLAIF, Bai et al. 2022; Lee et al. 2023).

For each prompt the policy samples k responses; the reward (a rule verifier, the LLM judge,
a reward model, or a weighted mix of them) scores each, and the best and the worst become a
(chosen, rejected) pair, written as JSONL that `rlxf rm` and `rlxf dpo` read:

    {"prompt": ..., "chosen": ..., "rejected": ..., "chosen_score": ..., "rejected_score": ..., "uid": ...}

``prompt`` is the prompt text with the chat template already applied, exactly what the policy
saw and what the ``reward_model`` verifier is later given, so read these files with
``data.apply_chat_template: false``.

A sample whose reward failed (a verifier raised, timed out or crashed) scores
``reward.error_score``, which says nothing about the response, so it is left out of the choice
of best and worst; a prompt with fewer than two scored samples gives no pair. Failures are
counted in ``label_summary.json``, and as in RL too many of them stop the run with the first
traceback: more than ``reward.max_error_frac_first_step`` of the first batch's samples, or more
than ``reward.max_error_frac`` of a later batch's. Pairs are written batch by batch, so a run
stopped part way keeps those it made, in ``pairs_<split>.partial.jsonl``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rlxf.config import Config
from rlxf.config.preference import LabelConfig
from rlxf.config.reward import RewardConfig
from rlxf.errors import UserInputError
from rlxf.rollout import SamplingParams
from rlxf.run_dir import RunDir
from rlxf.trainer.collect import Rollout, stop_on_reward_failures
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt, Trajectory

log = logging.getLogger("rlxf")


def best_and_worst(group: list[Trajectory]) -> tuple[Trajectory, Trajectory] | None:
    """The highest- and lowest-rewarded samples of one prompt (the first of equals) among those
    whose reward did not fail; None when fewer than two were scored."""
    scored = [t for t in group if t.reward_error is None]
    if len(scored) < 2:
        return None
    best = max(range(len(scored)), key=lambda i: (scored[i].reward, -i))
    worst = min(range(len(scored)), key=lambda i: (scored[i].reward, i))
    return scored[best], scored[worst]


def label_prompts(rollout: Rollout, prompts: list[Prompt], sampling: SamplingParams, cfg: LabelConfig, *,
                  seed: int, reward: RewardConfig, run_start: bool = True, split: str = "train",
                  on_batch: Callable[[list[dict]], None] | None = None) -> tuple[list[dict], dict[str, float]]:
    """Pairs for ``prompts`` (one per prompt whose scored samples differ by more than
    ``cfg.min_gap``) and counts: prompts, pairs, ties dropped (best and worst scored within
    ``min_gap``, or are the same text: a reward that scores one text two ways), prompts left
    without a pair because fewer than two samples were scored (``unscored``), samples whose reward failed
    (``reward_failed``), mean best-worst gap.

    Too many failed rewards in a batch raise ``RewardFailures``; with ``run_start`` the first
    batch is the run's first and is held to ``reward.max_error_frac_first_step``. ``on_batch``
    gets each batch's pairs as soon as they are made."""
    sampling = replace(sampling, n=cfg.k)
    pairs: list[dict] = []
    ties = unscored = failed = 0
    first_error: str | None = None
    for start in range(0, len(prompts), cfg.batch_prompts):
        chunk = prompts[start:start + cfg.batch_prompts]
        trajs = rollout.generate(chunk, [derive_seed(seed, start + i) for i in range(len(chunk))], sampling)
        rollout.score(trajs, sampling.max_new_tokens)
        stop_on_reward_failures(
            trajs, reward, first=run_start and start == 0,
            where=f"rlxf label, {split} prompts {start}-{start + len(chunk) - 1}",
            carry_on=(f"label on: samples whose reward failed (scored reward.error_score={reward.error_score:g}) "
                      "are left out of the pairs and counted in label_summary.json"))
        errors = [t.reward_error for t in trajs if t.reward_error is not None]
        failed += len(errors)
        first_error = first_error or (errors[0] if errors else None)
        made = len(pairs)
        groups: dict[int, list[Trajectory]] = {}
        for t in trajs:
            groups.setdefault(t.group, []).append(t)
        for group in groups.values():
            ends = best_and_worst(group)
            if ends is None:
                unscored += 1
                continue
            chosen, rejected = ends
            # one response scored twice (a sampling judge): its two scores say nothing about it
            if chosen.reward - rejected.reward <= cfg.min_gap or chosen.response_text == rejected.response_text:
                ties += 1
                continue
            pairs.append({"prompt": chosen.prompt.prompt_text, "chosen": chosen.response_text,
                          "rejected": rejected.response_text, "chosen_score": chosen.reward,
                          "rejected_score": rejected.reward, "uid": chosen.prompt.uid})
        if on_batch is not None:
            on_batch(pairs[made:])
    if failed:
        log.warning("label %s: the reward failed on %d of %d samples, left out of the pairs (%d prompts were left "
                    "with fewer than 2 scored samples and gave no pair). The first failure:\n%s", split, failed,
                    len(prompts) * cfg.k, unscored, first_error)
    gap = sum(p["chosen_score"] - p["rejected_score"] for p in pairs) / max(1, len(pairs))
    return pairs, {"prompts": float(len(prompts)), "pairs": float(len(pairs)), "ties": float(ties),
                   "unscored": float(unscored), "reward_failed": float(failed), "gap_mean": gap}


def label_split(rollout: Rollout, run_path: Path, split: str, prompts: list[Prompt], sampling: SamplingParams,
                cfg: LabelConfig, *, seed: int, reward: RewardConfig, run_start: bool) -> dict[str, float]:
    """``label_prompts`` into ``<run>/pairs_<split>.jsonl``; returns the counts. Each batch's pairs
    are written as soon as they are made, to ``pairs_<split>.partial.jsonl``, renamed when the
    split is done: a run stopped part way (too many failed rewards, a signal) keeps the pairs it
    has paid for, under a name that no reader takes for the whole split."""
    partial, done = run_path / f"pairs_{split}.partial.jsonl", run_path / f"pairs_{split}.jsonl"

    try:
        with open(partial, "w") as f:
            def write(pairs: list[dict]) -> None:
                f.writelines(json.dumps(p) + "\n" for p in pairs)
                f.flush()

            _, counts = label_prompts(rollout, prompts, sampling, cfg, seed=seed, reward=reward,
                                      run_start=run_start, split=split, on_batch=write)
    except BaseException:
        if partial.exists() and partial.stat().st_size:   # an empty one goes with an unused run directory
            log.warning("label %s stopped; the pairs of the batches it finished are in %s", split, partial)
        raise
    partial.replace(done)
    return counts


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
    run.write_config(dump_config(cfg))
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
            counts = label_split(rollout, run.path, split, prompts, sampling, cfg.label, seed=seed,
                                 reward=cfg.reward, run_start=split == "train")
            log.info("label %s: %d pairs from %d prompts (%d ties dropped, %d without 2 scored samples; "
                     "%d failed rewards), mean score gap %.3g -> %s", split, counts["pairs"], len(prompts),
                     counts["ties"], counts["unscored"], counts["reward_failed"], counts["gap_mean"],
                     run.path / f"pairs_{split}.jsonl")
            out[split] = counts
    finally:
        reward.close()
    (run.path / "label_summary.json").write_text(json.dumps(out, indent=1) + "\n")
    return out

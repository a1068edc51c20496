"""Held-out evaluation: greedy accuracy, and pass@k and mean@k from k samples per problem.

With no held-out prompts there is nothing to measure: evaluation raises ``NoHeldOutPrompts``
(`rlxf eval` exits 2 on it; training checks first, warns once and skips evaluation) rather
than report an accuracy over zero problems.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rlxf.config.reward import RewardConfig
from rlxf.config.train import EvalConfig
from rlxf.errors import UserInputError
from rlxf.rollout import SamplingParams
from rlxf.trainer.collect import EngineRollout, Rollout, stop_on_reward_failures
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt, source_of

if TYPE_CHECKING:
    from rlxf.config.data import DataConfig


class NoHeldOutPrompts(UserInputError):
    """Evaluation asked for with no held-out prompts (an accuracy over none would be made up)."""


def no_held_out_hint(data: DataConfig) -> str:
    """Why there is nothing to evaluate on, and which data field gives a held-out split."""
    if not data.sources and data.source == "task":  # a task always holds some back: all were too long
        how = "raise data.max_prompt_len: every held-out problem is longer than it, so all were dropped"
    else:
        at = "data.sources[i]." if data.sources else "data."
        hub = any(s.source == "hf" for s in data.sources or [data])
        how = (f"set {at}test_path to a file of held-out prompts"
               + (f" (a Hugging Face dataset: {at}test_split)" if hub else ""))
    return f"the data has no held-out prompts, so there is no accuracy to measure; to get some, {how}"


def evaluate_rollout(rollout: Rollout, prompts: list[Prompt], sampling: SamplingParams, *,
                     pass_k: int = 0, seed: int = 0, prefix: str = "eval/",
                     reward_cfg: RewardConfig | None = None) -> dict[str, float]:
    """Score ``rollout``'s responses to ``prompts`` (a placement, or ``EngineRollout``).

    ``<prefix>accuracy``: fraction answered correctly with greedy decoding (one response each).
    ``<prefix>pass@k``: fraction with at least one correct answer among k samples drawn at
    ``sampling.temperature`` (when ``pass_k`` > 0; needs a temperature > 0), and
    ``<prefix>mean@k`` the fraction of those k x problems samples that are correct: the policy's
    own accuracy, which RL moves before (or without) moving the greedy answer.
    ``<prefix><source>/accuracy``: greedy accuracy per data source, when there are several, and
    ``<prefix>source_mean_accuracy``, their unweighted mean (each source counts once, however
    many held-out problems it has), and ``<prefix><source>/pass@k`` and ``mean@k`` with
    ``pass_k``: whether a source is ever solved by sampling says whether RL has anything to learn
    from there.

    A sample whose reward failed (the verifier raised, timed out or crashed) counts as wrong, and
    ``<prefix>reward_error_frac`` says how many did; past ``reward_cfg.max_error_frac`` (default
    0.5) the evaluation stops with the first failure (``RewardFailures``): an accuracy of 0 from
    a verifier that cannot score the held-out data would read as a model that learned nothing.
    """
    if not prompts:  # callers that know the config say how to get some (``no_held_out_hint``)
        raise NoHeldOutPrompts("no held-out prompts to evaluate on; an accuracy over none would be made up")
    if pass_k > 0 and sampling.temperature <= 0:
        raise ValueError("eval.pass_k needs rollout.temperature > 0 (k greedy samples are all the same)")
    greedy = replace(sampling, n=1, temperature=0.0, top_k=0, top_p=1.0)
    limits = reward_cfg if reward_cfg is not None else RewardConfig()
    trajs = rollout.generate(prompts, [derive_seed(seed, i) for i in range(len(prompts))], greedy)
    rollout.score(trajs, greedy.max_new_tokens)
    failed, scored = _check_reward_failures(trajs, limits, "greedy"), len(trajs)
    n = len(prompts)
    out = {
        f"{prefix}accuracy": sum(bool(t.correct) for t in trajs) / n,
        f"{prefix}reward_mean": sum(t.reward for t in trajs) / max(1, len(trajs)),
        f"{prefix}length_mean": sum(len(t.response_ids) for t in trajs) / max(1, len(trajs)),
        f"{prefix}num_problems": float(len(prompts)),
    }
    out.update(_per_source_accuracy(trajs, prefix))
    if pass_k > 0:
        sampled = replace(sampling, n=pass_k)
        trajs = rollout.generate(prompts, [derive_seed(seed, 1, i) for i in range(len(prompts))], sampled)
        rollout.score(trajs, sampled.max_new_tokens)
        failed, scored = failed + _check_reward_failures(trajs, limits, f"pass@{pass_k}"), scored + len(trajs)
        right = [0] * len(prompts)   # correct samples per prompt (group i answers prompts[i])
        for t in trajs:
            right[t.group] += bool(t.correct)
        out[f"{prefix}pass@k"] = sum(r > 0 for r in right) / n
        out[f"{prefix}mean@k"] = sum(right) / (n * pass_k)
        sources = [source_of(p.uid) for p in prompts]
        for source in sorted(set(sources)) if len(set(sources)) > 1 else ():
            rows = [right[i] for i, s in enumerate(sources) if s == source]
            out[f"{prefix}{source}/pass@k"] = sum(r > 0 for r in rows) / len(rows)
            out[f"{prefix}{source}/mean@k"] = sum(rows) / (len(rows) * pass_k)
        out[f"{prefix}k"] = float(pass_k)
    if failed:
        out[f"{prefix}reward_error_frac"] = failed / scored
    return out


def _check_reward_failures(trajs, limits: RewardConfig, which: str) -> int:
    """How many of ``trajs`` had their reward fail; raises past ``limits.max_error_frac``."""
    stop_on_reward_failures(trajs, limits, first=False, where=f"held-out evaluation ({which} samples)",
                            carry_on="evaluate on, counting the failed samples as wrong")
    return sum(t.reward_error is not None for t in trajs)


def _per_source_accuracy(trajs, prefix: str) -> dict[str, float]:
    """``<prefix><source>/accuracy`` for each data source (``source_of`` the prompt's uid) and
    their mean, when the held-out prompts come from more than one: a mixture's average hides
    which task moved (RL on one source can cost another its accuracy)."""
    by_source: dict[str, list[bool]] = {}
    for t in trajs:
        by_source.setdefault(source_of(t.prompt.uid), []).append(bool(t.correct))
    if len(by_source) < 2:
        return {}
    out = {f"{prefix}{source}/accuracy": sum(c) / len(c) for source, c in sorted(by_source.items())}
    out[f"{prefix}source_mean_accuracy"] = sum(out.values()) / len(out)
    return out


def held_out_prompts(test: list[Prompt], num_problems: int) -> list[Prompt]:
    """The first ``num_problems`` held-out prompts of each source (one source: of the split)."""
    taken: dict[str, int] = {}
    out = []
    for p in test:
        source = source_of(p.uid)
        if taken.get(source, 0) < num_problems:
            taken[source] = taken.get(source, 0) + 1
            out.append(p)
    return out


def evaluate_prompts(engine, tokenizer, reward, prompts: list[Prompt], sampling: SamplingParams, *,
                     pass_k: int = 0, seed: int = 0, prefix: str = "eval/",
                     reward_cfg: RewardConfig | None = None) -> dict[str, float]:
    """``evaluate_rollout`` with an in-process engine, tokenizer and reward."""
    return evaluate_rollout(EngineRollout(engine, tokenizer, reward), prompts, sampling, pass_k=pass_k, seed=seed,
                            prefix=prefix, reward_cfg=reward_cfg)


def evaluate_saved_model(model_dir, cfg, num_problems: int) -> dict[str, float]:
    """Greedy metrics of the model saved in ``model_dir`` on the first ``num_problems`` held-out
    problems of each source of ``cfg``'s data (its split by ``cfg.seeds.data``, as the run drew
    it), sampled and scored as ``cfg`` says with ``cfg.seeds.sampling`` (the quickstart's and the
    benchmarks' final tables: one model after another on the same problems); with
    ``cfg.eval.pass_k``, pass@k and mean@k too. Raises
    ``NoHeldOutPrompts`` (before loading the model) when the data has none."""
    from rlxf.data import build_prompt_data
    from rlxf.models import load_model, load_tokenizer
    from rlxf.models.loading import check_vocab
    from rlxf.rewards import build_run_reward
    from rlxf.rollout import build_engine_from_config

    tokenizer = load_tokenizer(model_dir)
    seeds = cfg.seeds
    prompts = held_out_prompts(build_prompt_data(cfg.data, tokenizer, seed=seeds.data).test, num_problems)
    if not prompts:
        raise NoHeldOutPrompts(no_held_out_hint(cfg.data))
    model = load_model(model_dir)
    check_vocab(model, tokenizer, model_what=f"the model in {model_dir}")
    engine = build_engine_from_config(cfg.rollout, model, tokenizer, seed=seeds.sampling)
    reward = build_run_reward(cfg)
    try:
        return evaluate_prompts(engine, tokenizer, reward, prompts, SamplingParams.from_config(cfg.rollout),
                                pass_k=cfg.eval.pass_k, seed=seeds.sampling, reward_cfg=cfg.reward)
    finally:
        reward.close()


def evaluate(rollout: Rollout, test: list[Prompt], cfg: EvalConfig, sampling: SamplingParams,
             seed: int, reward_cfg: RewardConfig | None = None) -> dict[str, float]:
    """Evaluate the current policy (the engine's weights) on the held-out split ``test``."""
    if cfg.max_new_tokens is not None:
        sampling = replace(sampling, max_new_tokens=cfg.max_new_tokens)
    return evaluate_rollout(rollout, held_out_prompts(test, cfg.num_problems), sampling, pass_k=cfg.pass_k, seed=seed,
                            reward_cfg=reward_cfg)

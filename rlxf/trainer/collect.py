"""The rollout phase: sample a group of responses per prompt and score them.

With DAPO's dynamic sampling, groups whose rewards are all equal carry no learning signal
(every advantage is 0), so they are dropped and more prompts are sampled until the batch is
full again or ``algorithm.max_sampling_rounds`` is reached.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rlxf.algorithms import dynamic_sampling_keep
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.reward import RewardConfig
from rlxf.data import Sampler
from rlxf.data.curriculum import Curriculum
from rlxf.rewards.types import RewardInput, batch_metrics
from rlxf.rollout import GenerationRequest, SamplingParams
from rlxf.rollout.stream import trajectories_of
from rlxf.trainer.seeds import derive_seed
from rlxf.trainer.timer import PhaseTimer
from rlxf.types import Prompt, Trajectory

log = logging.getLogger("rlxf")


def generate(engine, tokenizer, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams,
             first_group: int = 0) -> list[Trajectory]:
    """n responses per prompt, as unscored trajectories (group = first_group + prompt index)."""
    requests = [GenerationRequest(p.prompt_ids, seed=s) for p, s in zip(prompts, seeds)]
    groups = engine.generate(requests, sampling)
    return [t for g, (prompt, completions) in enumerate(zip(prompts, groups))
            for t in trajectories_of(prompt, first_group + g, completions, tokenizer)]


def score(reward, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
    """Fill in each trajectory's reward, per-verifier scores and correctness; returns metrics."""
    scored = reward.score([RewardInput.from_trajectory(t, max_new_tokens) for t in trajs])
    for t, s in zip(trajs, scored):
        t.reward, t.scores, t.correct, t.reward_error = s.reward, dict(s.scores), s.correct, s.error
    return batch_metrics(scored)


class Rollout(Protocol):
    """What collecting and evaluating need: a placement, or ``EngineRollout`` around an engine."""

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]: ...

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]: ...


@dataclass
class EngineRollout:
    """``Rollout`` over an in-process engine and reward (the local placement, SFT's and
    ``rlxf eval``'s held-out evaluation)."""

    engine: Any
    tokenizer: Any
    reward: Any

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        return generate(self.engine, self.tokenizer, prompts, seeds, sampling, first_group)

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        return score(self.reward, trajs, max_new_tokens)


class RewardFailures(RuntimeError):
    """More of a step's rewards failed than ``reward.max_error_frac`` allows."""


def check_reward_failures(trajs: list[Trajectory], step: int, reward: RewardConfig) -> None:
    """Stop the run when too many of this step's rewards failed.

    A failed reward scores ``reward.error_score``, so a reward function that raises on every
    sample would otherwise train on constant rewards (reward 0.000 on the console) while the
    exceptions sit in samples.jsonl. The first step allows ``max_error_frac_first_step``
    (default none): a broken reward function shows before any training. A step in which every
    episode (``env``) ended in an error stops the run too: a broken environment would otherwise
    train on nothing, step after step, and finish with exit code 0.
    """
    episodes = [t for t in trajs if t.episode is not None]
    if episodes and all(t.episode["end"] == "error" for t in episodes):
        first = episodes[0]
        raise RewardFailures(
            f"step {step}: every one of its {len(episodes)} episodes ended in an error, so there is nothing to "
            f"learn from. The first (prompt {first.prompt.uid}):\n{first.episode['error']}\n"
            f"Fix the environment (env.name), its tools or its agent program; samples.jsonl has every episode's error."
        )
    stop_on_reward_failures(trajs, reward, first=step == 1, where=f"step {step}",
                            carry_on=f"train on with failed samples scored reward.error_score={reward.error_score:g}")


def stop_on_reward_failures(trajs: list[Trajectory], reward: RewardConfig, *, first: bool, where: str,
                            carry_on: str) -> None:
    """Raise ``RewardFailures`` when more of ``trajs`` failed their reward than the config allows:
    ``reward.max_error_frac_first_step`` for a run's ``first`` batch, else ``reward.max_error_frac``.
    ``where`` names the batch in the message, ``carry_on`` says what raising the limit does."""
    failed = [t for t in trajs if t.reward_error is not None]
    limit, name = ((reward.max_error_frac_first_step, "reward.max_error_frac_first_step") if first
                   else (reward.max_error_frac, "reward.max_error_frac"))
    if not failed or len(failed) <= limit * len(trajs):
        return
    first_failure = failed[0]
    raise RewardFailures(
        f"{where}: the reward failed on {len(failed)} of {len(trajs)} samples, more than {name}={limit:g} "
        f"allows. The first failure (prompt {first_failure.prompt.uid}):\n{first_failure.reward_error}\n"
        f"Fix the verifier, or raise {name} to {carry_on}."
    )


def collect(rollout: Rollout, sampler: Sampler, sampling: SamplingParams, algo: AlgorithmConfig, *,
            prompts_per_step: int, seed: int, step: int, timer: PhaseTimer,
            reward: RewardConfig | None = None,
            curriculum: Curriculum | None = None) -> tuple[list[Trajectory], dict[str, float]]:
    """This step's scored groups: ``prompts_per_step`` prompts x ``sampling.n`` samples.
    With ``reward``, too many failed rewards stop the run (``check_reward_failures``). With
    ``curriculum``, prompts it flags are skipped when drawn, and every group's pass rate is
    recorded (before dynamic sampling filters it)."""
    need = prompts_per_step
    n = sampling.n
    kept: list[Trajectory] = []
    generated: list[Trajectory] = []
    failures: dict[str, float] = {}   # verifier errors / timeouts / crashes, over every round
    drawn = 0
    for rnd in range(algo.max_sampling_rounds if algo.dynamic_sampling else 1):
        missing = need - len(kept) // n
        prompts = curriculum.draw(sampler, missing) if curriculum is not None else sampler.next_batch(missing)
        seeds = [derive_seed(seed, step, rnd, i) for i in range(len(prompts))]
        with timer("rollout"):
            trajs = rollout.generate(prompts, seeds, sampling, first_group=drawn)
        drawn += len(prompts)
        with timer("reward"):
            for key, value in rollout.score(trajs, sampling.max_new_tokens).items():
                if key.endswith(("errors", "timeouts", "crashes")):
                    failures[key] = failures.get(key, 0.0) + value
        generated += trajs
        if reward is not None:  # after each round: a reward failing every sample stops in round 1
            check_reward_failures(generated, step, reward)
        if curriculum is not None:
            curriculum.observe(trajs)
        if algo.dynamic_sampling:
            keep = informative_samples(trajs, algo.mask_truncated)
            trajs = [t for t, k in zip(trajs, keep) if k]
        kept += trajs
        if len(kept) >= need * n:
            break
    informative = len(kept)
    if not kept:  # every group agreed in every round: nothing to learn from (the update changes nothing)
        last = set(sorted({t.group for t in generated})[-need:])   # whole groups: a round may draw fewer
        kept = [t for t in generated if t.group in last]
    if len(kept) > need * n:  # whole groups only: keep the first `need` groups
        first = set(sorted({t.group for t in kept})[:need])
        kept = [t for t in kept if t.group in first]
    # rewards and accuracy of everything sampled: the policy's performance, not the filtered batch's
    metrics = batch_metrics_of(generated)
    if algo.dynamic_sampling:
        metrics |= {"sampling/rounds": float(rnd + 1), "sampling/prompts_drawn": float(drawn),
                    "sampling/kept_frac": min(informative, need * n) / max(1, len(generated))}
        # over everything sampled: the groups kept disagree, so they never show a policy that
        # samples one response n times
        if (identical := identical_group_frac(generated)) is not None:
            metrics["sampling/identical_frac"] = identical
    metrics |= failures
    if curriculum is not None:
        metrics |= curriculum.step_metrics()
    return kept, metrics


def informative_samples(trajs: list[Trajectory], mask_truncated: bool) -> list[bool]:
    """Which samples dynamic sampling keeps: those of groups with a trained sample whose advantage
    is not 0 (``dynamic_sampling_keep``). With ``mask_truncated`` a truncated sample is no trained
    one: a group whose spread lies in samples the loss masks would teach nothing."""
    if not trajs:
        return []
    rewards = torch.tensor([t.reward for t in trajs])
    groups = torch.tensor([t.group for t in trajs])
    answered = torch.tensor([any(t.loss_mask) for t in trajs], dtype=torch.bool)
    trained = torch.tensor([t.finish_reason != "length" for t in trajs]) if mask_truncated else None
    return dynamic_sampling_keep(rewards, groups, answered, trained).tolist()


def batch_metrics_of(trajs: list[Trajectory]) -> dict[str, float]:
    """Reward statistics of ``trajs``: everything a step sampled (the policy's performance),
    not only the batch dynamic sampling kept."""
    if not trajs:
        return {}
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float64)
    out = {"reward/mean": float(rewards.mean()),
           "reward/std": float(rewards.std()) if len(trajs) > 1 else 0.0}
    for name in dict.fromkeys(k for t in trajs for k in t.scores):
        vals = [t.scores[name] for t in trajs if name in t.scores]
        out[f"reward/{name}"] = sum(vals) / len(vals)
    verdicts = [t.correct for t in trajs if t.correct is not None]
    if verdicts:
        out["accuracy"] = sum(verdicts) / len(verdicts)
    if all(t.episode is not None for t in trajs):   # multi-turn episodes: turns and per-turn reward
        from rlxf.envs.agent import turn_metrics

        out |= turn_metrics(trajs)
    return out


def identical_group_frac(trajs: list[Trajectory]) -> float | None:
    """The share of groups (of two samples or more) whose samples are all one response, not a
    right one: a policy that has become deterministic on prompts it has not solved, so there is
    nothing left to compare (trainer.diagnostics). A group of one right response sampled n
    times is a prompt solved, and does not count; without an accuracy verdict (``correct``
    None) every such group counts. None without groups."""
    by_group: dict[int, list[Trajectory]] = {}
    for t in trajs:
        by_group.setdefault(t.group, []).append(t)
    groups = [g for g in by_group.values() if len(g) > 1]
    stuck = sum(len({tuple(t.response_ids) for t in g}) == 1 and not all(t.correct is True for t in g)
                for g in groups)
    return stuck / len(groups) if groups else None


def step_metrics(trajs: list[Trajectory], timer: PhaseTimer) -> dict[str, float]:
    """Response lengths, how alike the responses are (over prompts and within groups), and
    throughput of the step (so far)."""
    if not trajs:
        return {}
    lengths = [len(t.response_ids) for t in trajs]
    response_tokens = sum(lengths)
    total_tokens = response_tokens + sum(len(t.prompt.prompt_ids) for t in trajs)
    elapsed = time.perf_counter() - timer.start
    rollout_s = timer.seconds.get("rollout", 0.0)
    out = {}
    if len({t.prompt.uid for t in trajs}) > 1:
        # the share of the step's samples, over its different prompts, that are one response:
        # near 1 when the policy answers every question the same way (trainer.diagnostics)
        out["response/same_frac"] = Counter(tuple(t.response_ids) for t in trajs).most_common(1)[0][1] / len(trajs)
    identical = identical_group_frac(trajs)
    if identical is not None:
        out["groups/identical_frac"] = identical
    return out | {
        "response/length_mean": response_tokens / len(trajs),
        "response/length_max": float(max(lengths)),
        "response/truncated_frac": sum(t.finish_reason == "length" for t in trajs) / len(trajs),
        "throughput/tokens_per_s": total_tokens / elapsed if elapsed > 0 else 0.0,
        "throughput/samples_per_s": len(trajs) / elapsed if elapsed > 0 else 0.0,
        "throughput/rollout_tokens_per_s": response_tokens / rollout_s if rollout_s > 0 else 0.0,
        "samples": float(len(trajs)),
    }

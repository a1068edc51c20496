"""From scored trajectories to a training batch: log-probs, rewards on tokens, advantages.

    trajectories ──▶ pad (B, T) ──▶ π_old, π_ref, V (as needed) ──▶ token rewards ──▶ Â, returns
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from rlxf.algorithms import (
    AdvantageParams,
    MovingBaseline,
    kl_penalty,
    kl_shaped_rewards,
    masked_mean,
    outcome_token_rewards,
    overlong_buffer_tokens,
    registry,
    sequence_scores,
    soft_overlong_penalty,
    zero_masked,
)
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.errors import UserInputError
from rlxf.trainer.roles import Actor, Critic, Reference
from rlxf.types import Experience, Trajectory


def pad(rows: list[list[float]] | list[list[int]], width: int, dtype=torch.float32) -> Tensor:
    out = torch.zeros(len(rows), width, dtype=dtype)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.as_tensor(row, dtype=dtype)
    return out


@dataclass
class ExperienceMaker:
    """Turns a step's trajectories into an ``Experience``, for whichever algorithm is configured."""

    advantage: Callable                 # registry estimator, one signature for all
    params: AdvantageParams
    kl_in_reward: bool                  # kl_mode == "reward" and kl_coef > 0
    kl_estimator: str
    overlong_buffer: int                # DAPO soft overlong penalty buffer, tokens (0 = off)
    overlong_penalty: float
    max_new_tokens: int
    recompute_old: bool                 # False when one optimizer step sees fresh samples (π_old = π_θ)
    baseline: MovingBaseline            # for `reinforce`; the other estimators ignore it
    mask_truncated: bool = False        # overlong filtering: truncated samples train nothing (``masked_truncated``)

    @classmethod
    def from_config(cls, algo: AlgorithmConfig, max_new_tokens: int, optimizer_steps_per_step: int) -> ExperienceMaker:
        kl_in_reward = algo.kl_coef > 0 and algo.kl_mode == "reward"
        return cls(
            advantage=registry.checked("advantage", algo.advantage),
            params=AdvantageParams(gamma=algo.gamma, gae_lambda=algo.gae_lambda, norm_by_std=algo.norm_adv_by_std),
            kl_in_reward=kl_in_reward,
            kl_estimator=algo.kl_estimator,
            overlong_buffer=overlong_buffer_tokens(algo.overlong_buffer, max_new_tokens),
            overlong_penalty=algo.overlong_penalty,
            max_new_tokens=max_new_tokens,
            # the old policy needs its own forward only when the batch sees several optimizer
            # steps (PPO epochs / mini-batches) or when KL-in-reward needs π_old before the update.
            # Off-policy corrections read π_old too (π_prox, over the engine's π_rollout), but with
            # one optimizer step the update's first forward is π_old exactly (no weight has moved
            # yet), so they need no forward of their own: staleness lives in rollout_logprobs.
            recompute_old=optimizer_steps_per_step > 1 or kl_in_reward,
            baseline=MovingBaseline(),
            mask_truncated=algo.mask_truncated,
        )

    def __call__(self, trajs: list[Trajectory], actor: Actor, reference: Reference | None,
                 critic: Critic | None, kl_coef: float) -> tuple[Experience, dict[str, float]]:
        prompt_ids = [t.prompt.prompt_ids for t in trajs]
        response_ids = [t.response_ids for t in trajs]
        width = max((len(r) for r in response_ids), default=0)
        mask = pad([t.loss_mask for t in trajs], width)
        rollout_logprobs = pad([t.rollout_logprobs for t in trajs], width)
        # π_old's own forward, when there is one, runs over every row only if KL-in-reward reads
        # it before the advantages; else over the rows the update will run (below)
        old = actor.logprobs(prompt_ids, response_ids) if self.recompute_old and self.kl_in_reward else None
        ref = reference.logprobs(prompt_ids, response_ids) if reference is not None else None
        values = critic.values(prompt_ids, response_ids) if critic is not None else None

        scores = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
        metrics: dict[str, float] = {}
        shaping = torch.zeros_like(scores)
        if self.overlong_buffer:
            lengths = torch.tensor([t.longest_turn for t in trajs], dtype=torch.float32)
            shaping = soft_overlong_penalty(lengths, self.max_new_tokens, self.overlong_buffer, self.overlong_penalty)
            metrics["reward/overlong_penalty"] = float(shaping.mean())
        scores = scores + shaping
        token_rewards = outcome_token_rewards(scores, mask)
        placed = [t.token_rewards is not None for t in trajs]
        if any(placed):  # multi-turn per-turn credit: each turn's reward on that turn's last model token
            explicit = pad([t.token_rewards or [] for t in trajs], width) * mask
            explicit = explicit + outcome_token_rewards(shaping, mask)
            token_rewards = torch.where(torch.tensor(placed)[:, None], explicit, token_rewards)
        check_returns_fit(trajs, token_rewards, mask)
        if self.kl_in_reward:
            token_rewards = kl_shaped_rewards(token_rewards, old, ref, mask, kl_coef, self.kl_estimator)
        group_ids = torch.tensor([t.group for t in trajs], dtype=torch.long)
        params = replace(self.params, baseline=self.baseline.value)
        advantages, returns = self.advantage(token_rewards, mask, group_ids, values, params)
        if values is None:  # (with a critic, an infinite advantage may be the critic's: the divergence guard's)
            check_advantages_fit(trajs, advantages, mask)
        # the mean return of the answers: a failed episode's 0 is no answer (algorithms.groups),
        # and counting it would pull b below what every answer earns
        answered = mask.bool().any(dim=-1)
        if answered.any():
            self.baseline.update(float(sequence_scores(token_rewards, mask)[answered].mean()))
        if self.mask_truncated:
            mask, masked = masked_truncated(trajs, mask)
            advantages, returns = zero_masked(advantages, mask), zero_masked(returns, mask)
            metrics |= masked

        metrics["advantage/mean"] = float(masked_mean(advantages, mask))
        metrics["advantage/abs_mean"] = float(masked_mean(advantages.abs(), mask))
        exp = Experience(prompt_ids=prompt_ids, response_ids=response_ids, mask=mask,
                         rollout_logprobs=rollout_logprobs, old_logprobs=old, advantages=advantages,
                         group_ids=group_ids, rewards=scores, ref_logprobs=ref, values=values,
                         returns=returns if critic is not None else None,
                         policy_versions=pad([t.policy_versions for t in trajs], width, dtype=torch.long))
        if self.recompute_old and old is None:
            exp = replace(exp, old_logprobs=old_logprobs_of_run_rows(actor, exp))
        return exp, metrics

    def state_dict(self) -> dict:
        return {"baseline": self.baseline.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.baseline.load_state_dict(state["baseline"])


def check_returns_fit(trajs: list[Trajectory], token_rewards: Tensor, mask: Tensor) -> None:
    """Refuse a sample whose return, in the float32 the advantages are computed in, is not finite.

    The rewards arrive as finite Python floats, but one above float32's 3.4e38 (or per-turn
    rewards that sum past it) becomes inf here, then nan in its group's statistics (the whole
    batch's under REINFORCE++ or GAE whitening): the step would be skipped as if training had
    diverged, and the divergence guard would blame the learning rate."""
    bad = ~torch.isfinite(sequence_scores(token_rewards, mask))
    if bad.any():
        t = trajs[int(bad.nonzero()[0, 0])]
        raise UserInputError(
            f"a sample of prompt {t.prompt.uid} has reward {t.reward:g}, whose return float32 cannot hold "
            f"(|return| <= {torch.finfo(torch.float32).max:.3g}); its group's advantages would be nan. "
            "Scale the rewards down: in the reward function or environment, or with reward.verifiers[].weight")


def check_advantages_fit(trajs: list[Trajectory], advantages: Tensor, mask: Tensor) -> None:
    """Refuse rewards whose differences float32 cannot hold: each return fits, but an
    estimator that does not divide by a std (RLOO, Dr. GRPO, MaxRL, ...) subtracts a baseline,
    and two returns near ±3.4e38 are 6.8e38 apart: an infinite advantage, an infinite loss, and
    a step skipped as if training had diverged. (A nan advantage is left to that guard: a
    critic that diverged gives one too.)"""
    bad = torch.isinf(advantages) & mask.bool()
    if bad.any():
        t = trajs[int(bad.any(dim=-1).nonzero()[0, 0])]
        raise UserInputError(
            f"a sample of prompt {t.prompt.uid} (reward {t.reward:g}) has an infinite advantage: the rewards of its "
            f"group or batch differ by more than float32 holds ({torch.finfo(torch.float32).max:.3g}). Scale the "
            "rewards down: in the reward function or environment, or with reward.verifiers[].weight")


def masked_truncated(trajs: list[Trajectory], mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """Overlong filtering (DAPO, Yu et al. 2025; TRL's ``mask_truncated_completions``): ``mask``
    (B, T) with the rows of truncated samples (``finish_reason == "length"``) zeroed, and the share
    of the answered samples and of their tokens that this masked.

    A response cut off mid-thought is scored as if it had finished: its reward says little about
    its tokens, and training on it teaches the policy to ramble or to stop anywhere. Masked, it
    adds nothing to the policy, KL, entropy or value loss, nor to their token and sequence
    counts; the critic is not fit to it either (GAE ends it as if it had finished, so its value
    targets are not its return). The advantages are computed before, as without the option (as
    TRL's): a truncated sample is in its group's baseline and in any batch whitening. Its reward
    is what the policy earned on the prompt, so it belongs in the baseline, and leaving it out
    would turn [right, cut off, cut off] into a group of one, with no signal for the right
    answer. So with the overlong penalty (``overlong_buffer``): a truncated sample's penalty
    lowers its group's baseline and moves nothing else.
    """
    cut = torch.tensor([t.finish_reason == "length" for t in trajs], dtype=torch.bool)
    answered = mask.bool().any(dim=-1)
    kept = mask * (~cut)[:, None].to(mask.dtype)
    tokens = mask.bool().sum()
    return kept, {"response/truncated_masked_frac": float((cut & answered).sum()) / max(1, int(answered.sum())),
                  "response/truncated_masked_token_frac": float(tokens - kept.bool().sum()) / max(1, int(tokens))}


def old_logprobs_of_run_rows(actor: Actor, exp: Experience) -> Tensor:
    """log π_old, (B, T), for the rows the actor's update will run (``Actor.rows_to_run``), 0 on
    the others. A row whose advantages are all 0 adds nothing to the loss, so the update never
    reads its π_old, and on GRPO most rows are such rows (a group whose rewards agree). Measured
    with mini-batches: benchmarks/README.md, "Samples without signal"."""
    rows = actor.rows_to_run(exp, list(range(len(exp))))
    if len(rows) == len(exp):
        return actor.logprobs(exp.prompt_ids, exp.response_ids)
    old = torch.zeros_like(exp.rollout_logprobs)
    if rows:
        ran = actor.logprobs([exp.prompt_ids[i] for i in rows], [exp.response_ids[i] for i in rows])
        old[rows, :ran.shape[1]] = ran
    return old


def drift_metrics(exp: Experience, trainer_logprobs: Tensor, kl_estimator: str,
                  trainer_version: int | None = None, rows: Tensor | None = None) -> dict[str, float]:
    """How far apart the policies are, measured on this batch's response tokens.

    ``trainer_logprobs`` are log π_old as the trainer computes it (recomputed, or the first
    forward of the update), with the weights of ``trainer_version``. ``rollout/logprob_gap_*`` =
    |log π_rollout - log π_old| over the tokens the engine sampled with those same weights: the
    engine/trainer mismatch, ~1e-6 on CPU fp32. Tokens sampled with older weights (async RL,
    ``Experience.policy_versions`` < ``trainer_version``) differ by what training changed too, so
    they are measured apart, ``rollout/stale_logprob_gap_mean``; when every token is stale the
    mismatch cannot be told from training and the gap metrics are left out. ``trainer_version``
    None: every token counts as sampled with the trainer's weights. ``rows`` (B,) bool: the rows
    ``trainer_logprobs`` holds (the actor's update skips rows that add nothing to the loss, and
    its first forward then has none for them); None: all. ``kl``: KL(π_old ‖ π_ref) per token,
    when a reference exists and a token was measured.
    """
    held = exp.mask if rows is None else exp.mask * rows[:, None]
    valid = held.bool()
    # a token both call impossible (-inf on both sides) is no gap; -inf - -inf would be nan
    agree = torch.isinf(trainer_logprobs) & (exp.rollout_logprobs == trainer_logprobs)
    gap = torch.where(agree, torch.zeros_like(trainer_logprobs), exp.rollout_logprobs - trainer_logprobs).abs()
    fresh = valid
    out: dict[str, float] = {}
    if trainer_version is not None and exp.policy_versions is not None:
        fresh = valid & (exp.policy_versions == trainer_version)
        if (stale := valid & ~fresh).any():
            out["rollout/stale_logprob_gap_mean"] = float(gap[stale].mean())
    if fresh.any():
        out |= {"rollout/logprob_gap_max": float(gap[fresh].max()), "rollout/logprob_gap_mean": float(gap[fresh].mean())}
    elif not exp.mask.bool().any():  # nothing to measure: no gap
        out |= {"rollout/logprob_gap_max": 0.0, "rollout/logprob_gap_mean": 0.0}
    # over no token there is no measurement: a 0 would make an adaptive controller (kl_target)
    # shrink β on a step that showed nothing
    if exp.ref_logprobs is not None and valid.any():
        kl = kl_penalty(trainer_logprobs, exp.ref_logprobs, kl_estimator, mask=held)
        out["kl"] = float(masked_mean(kl, held))
    return out

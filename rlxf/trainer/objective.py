"""The actor's objective: policy loss (weighted by the off-policy correction) + KL term +
entropy bonus, picked by name from config.

The loop never asks which algorithm runs: the config's names become functions here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from rlxf.algorithms import OffPolicyParams, PolicyLossParams, kl_penalty, registry, token_mean
from rlxf.config.algorithm import AlgorithmConfig


@dataclass(frozen=True)
class Totals:
    """Mini-batch totals every micro-batch divides by, so accumulated gradients are exact."""

    num_tokens: Tensor  # () valid tokens in the mini-batch
    num_seqs: Tensor    # () sequences with a valid token in the mini-batch
    # samples in the mini-batch / samples the configured mini-batch holds; < 1 when dynamic
    # sampling dropped zero-variance groups it could not refill. The loss is scaled by it, as if
    # the missing rows were there with zero advantage, so that a handful of informative samples
    # moves the model as much as a handful warrants, not as much as a full batch.
    batch_fraction: float = 1.0
    # valid tokens and sequences of the rows the actor runs, when it skips rows that add nothing
    # to the loss (advantage 0 throughout; see ``PolicyObjective.zero_advantage_rows``): the
    # metrics describe those rows. None: every row runs (``num_tokens``, ``num_seqs``).
    run_tokens: Tensor | None = None
    run_seqs: Tensor | None = None

    def __post_init__(self) -> None:
        if not 0 < self.batch_fraction <= 1:
            raise ValueError(f"Totals.batch_fraction must be in (0, 1], got {self.batch_fraction!r}")


@dataclass(frozen=True)
class PolicyObjective:
    policy_loss: Callable
    aggregate: Callable
    params: PolicyLossParams
    correction: Callable      # off-policy correction: a detached weight per token (registry ``off_policy``)
    off_policy: OffPolicyParams
    agg_norm: float | None
    kl_in_loss: bool          # kl_mode == "loss" and kl_coef > 0
    kl_estimator: str
    entropy_coef: float
    # whether a row with advantage 0 on every token can change the loss or its gradient: the
    # policy loss says so when registered (``Needs.zero_advantage_rows``), and a KL or entropy
    # term in the loss always can. False lets the actor skip such rows (most of a GRPO batch
    # once most groups agree) and still take exactly the full batch's step.
    zero_advantage_rows: bool = True

    @classmethod
    def from_config(cls, algo: AlgorithmConfig, max_new_tokens: int) -> PolicyObjective:
        return cls(
            policy_loss=registry.checked("policy_loss", algo.policy_loss),
            aggregate=registry.checked("loss_agg", algo.loss_agg),
            params=PolicyLossParams(clip_eps_low=algo.clip_eps_low, clip_eps_high=algo.clip_eps_high,
                                    dual_clip_c=algo.dual_clip_c, cispo_eps_high=algo.cispo_eps_high),
            correction=registry.checked("off_policy", algo.off_policy),
            off_policy=OffPolicyParams(cap=algo.is_cap, floor=algo.is_floor, level=algo.is_level),
            agg_norm=float(algo.loss_agg_norm or max_new_tokens),
            kl_in_loss=algo.kl_coef > 0 and algo.kl_mode == "loss",
            kl_estimator=algo.kl_estimator,
            entropy_coef=algo.entropy_coef,
            zero_advantage_rows=(registry.needs("policy_loss", algo.policy_loss).zero_advantage_rows
                                 or (algo.kl_coef > 0 and algo.kl_mode == "loss") or algo.entropy_coef > 0),
        )

    def __call__(self, logprobs: Tensor, entropy: Tensor | None, old_logprobs: Tensor, advantages: Tensor,
                 mask: Tensor, totals: Totals, *, rollout_logprobs: Tensor | None = None,
                 ref_logprobs: Tensor | None = None, kl_coef: float = 0.0) -> tuple[Tensor, dict[str, Tensor]]:
        """This micro-batch's share of the mini-batch loss (sum the shares over micro-batches).

        All tensors (b, T). ``old_logprobs`` is π_old, the clip's anchor and the numerator of the
        off-policy weight π_old/π_rollout (``rollout_logprobs``, the engine's) that multiplies each
        token's policy loss. The loss is scaled by ``totals.batch_fraction``; the metrics describe
        the samples present and are not. Returns the scalar loss and detached 0-dim metrics, each also a
        share: summed over the micro-batches of a mini-batch it gives the mini-batch value
        (token-weighted for means) over the rows that run (``totals.run_tokens``), except
        ``*_max`` / ``*_min``, which combine by max / min.
        """
        agg = dict(num_tokens=totals.num_tokens, num_seqs=totals.num_seqs, norm=self.agg_norm)
        token_loss, loss_metrics = self.policy_loss(logprobs, old_logprobs, advantages, mask, self.params,
                                                    rollout_logprobs)
        weight, weight_metrics = self.correction(old_logprobs, rollout_logprobs, mask, self.off_policy)
        loss = self.aggregate(token_loss * weight, mask, **agg)
        run = agg if totals.run_tokens is None else dict(agg, num_tokens=totals.run_tokens, num_seqs=totals.run_seqs)
        share = mask.sum() / run["num_tokens"].clamp(min=1)
        metrics = {f"{prefix}/{k}": v if k.endswith(("_max", "_min")) else v * share
                   for prefix, group in (("policy", loss_metrics), ("off_policy", weight_metrics))
                   for k, v in group.items()}
        metrics["policy/loss"] = loss.detach()
        if self.kl_in_loss and ref_logprobs is not None:
            kl = self.aggregate(kl_penalty(logprobs, ref_logprobs, self.kl_estimator, mask=mask), mask, **agg)
            loss = loss + kl_coef * kl
            metrics["policy/kl_loss"] = kl.detach()
        if entropy is not None:
            ent = self.aggregate(entropy, mask, **agg)
            if self.entropy_coef > 0:
                loss = loss - self.entropy_coef * ent
            # reported per token (nats/token, as plotted), whatever the loss aggregates: under
            # seq_mean_token_sum_norm an entropy of 2.0 would read 2.0 x |y| / L
            metrics["entropy"] = token_mean(entropy.detach(), mask, num_tokens=run["num_tokens"])
        if totals.batch_fraction != 1.0:
            loss = loss * totals.batch_fraction
        return loss, metrics

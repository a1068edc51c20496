"""Off-policy corrections: a weight per token for samples the trainer's policy did not draw.

    weight, metrics = registry.get("off_policy", name)(old_logprobs, rollout_logprobs, mask, params)
    token_loss = token_loss * weight          # the objective does this, whatever the policy loss

Three policies meet in an RL step (Hilton et al. 2021, "Batch size-invariance for policy
optimization"; the same split is verl's "three-policy framework" and AReaL's decoupled loss):

- π_rollout, the behaviour policy: the engine's, which sampled the tokens. It differs from the
  trainer's π_old when the engine computes with other kernels or precision, and when it holds
  weights some versions older than the trainer (asynchronous RL with staleness k);
- π_old, the proximal policy: the trainer's weights when the step starts, recomputed by the
  trainer. It anchors the PPO clip of every policy loss;
- π_θ, the policy being trained.

A correction turns ρ = π_old / π_rollout into a detached weight w >= 0 that multiplies each
token's policy loss, so that the gradient estimates the on-policy one under π_old:

| name | weight | follows |
|---|---|---|
| ``none`` | 1 | today's PPO: π_rollout is taken to be π_old |
| ``tis`` | min(ρ, C) | Yao et al. 2025 (truncated IS); verl ``rollout_is``, slime ``--use-tis`` |
| ``mis`` | ρ · 1[C_low <= ρ <= C] | Liu, Li et al. 2025 (masked IS); verl ``rollout_rs``, slime ``mis.py`` mask mode |
| ``decoupled`` | ρ · 1[ρ <= C] (C optional) | Hilton et al. 2021; AReaL ``use_decoupled_loss``, ``behav_imp_weight_cap`` |

ρ is per token by default; ``params.level`` ``sequence`` uses the sequence's Π_t ρ_t and
``geometric`` its geometric mean (Π_t ρ_t)^(1/|y|), each given to every token of the sequence
(verl's and slime's levels). A token whose weight is 0 keeps its place in the loss normaliser
(AReaL's choice; verl and slime drop rejected tokens from it, which scales the survivors by
1/(1 - masked fraction)); that keeps the loss exact under gradient accumulation, where the
normaliser is fixed per mini-batch before any log-prob of it is known.

Inputs, all ``(B, T)``: ``old_logprobs`` log π_old (a constant), ``rollout_logprobs`` log π_rollout
from the engine, ``mask`` (1 on trained tokens), ``params`` an ``OffPolicyParams``. Returns the
weight ``(B, T)`` (detached; 0 on masked tokens) and 0-dim detached metrics over valid tokens:
``weight_mean``, ``weight_max``; ``ratio_max`` / ``ratio_min`` (ρ before any bound: how far the
engine is from the trainer); ``truncated_frac`` (tis) or ``masked_frac`` (mis, decoupled).
``none`` returns no metrics. Log-ratios are clamped to ±``max_log_ratio`` before ``exp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from rlxf.algorithms.masked import masked_count, masked_mean, masked_sum, summable_log_ratio, zero_masked
from rlxf.algorithms.registry import register

Level = Literal["token", "sequence", "geometric"]
LEVELS: tuple[str, ...] = ("token", "sequence", "geometric")


@dataclass(frozen=True)
class OffPolicyParams:
    """Bounds of the off-policy corrections (each uses the ones it names)."""

    cap: float | None = None       # C: tis truncates at it, mis and decoupled zero tokens above it
    floor: float | None = None     # C_low, mis: zero tokens below it; None = 1 / cap (verl)
    level: Level = "token"         # ρ per token, per sequence, or the sequence's geometric mean
    max_log_ratio: float = 20.0    # |log ρ| clamp before exp


def importance_ratio(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, level: Level = "token",
                     max_log_ratio: float = 20.0) -> Tensor:
    """ρ = π_old / π_rollout at ``level``, detached, (B, T) -> (B, T); 1 on masked tokens.

    ``sequence`` and ``geometric`` sum or average the raw per-token log-ratios of a row and give
    the result to each of its tokens; only the result is clamped. An infinite log-prob becomes a
    huge finite one (so the sum reaches the clamp) and inf - inf (a token impossible under both)
    counts as log ρ = 0; a nan log-prob (a broken forward) gives a nan weight, so the step fails
    loudly instead of trusting the token with ρ = 1.
    """
    if level not in LEVELS:
        raise ValueError(f"off-policy level must be one of {', '.join(LEVELS)}, got {level!r}")
    if old_logprobs.shape != mask.shape or rollout_logprobs.shape != mask.shape or mask.dim() != 2:
        raise ValueError(f"old_logprobs {tuple(old_logprobs.shape)}, rollout_logprobs "
                         f"{tuple(rollout_logprobs.shape)} and mask {tuple(mask.shape)} must all be (B, T)")
    valid = mask.bool()
    diff = summable_log_ratio(old_logprobs.detach(), rollout_logprobs.detach(), valid)
    if level == "sequence":
        diff = masked_sum(diff, valid, dim=-1, keepdim=True).expand_as(diff)
    elif level == "geometric":
        diff = masked_mean(diff, valid, dim=-1, keepdim=True).expand_as(diff)
    return zero_masked(diff.clamp(-max_log_ratio, max_log_ratio), valid).exp()


def _fraction(cond: Tensor, valid: Tensor) -> Tensor:
    return masked_mean(cond.to(torch.float32), valid)


def _extreme(x: Tensor, valid: Tensor, largest: bool) -> Tensor:
    """Max (or min) of ``x`` over valid entries; 1 when there are none."""
    if not x.numel():
        return x.new_ones(())
    picked = torch.where(valid, x, torch.full_like(x, -torch.inf if largest else torch.inf))
    value = picked.amax() if largest else picked.amin()
    return torch.where(masked_count(valid) > 0, value, torch.ones_like(value))


def _result(weight: Tensor, ratio: Tensor, valid: Tensor, **fractions: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    weight = zero_masked(weight, valid).detach()
    metrics = {
        "weight_mean": masked_mean(weight, valid),
        "weight_max": _extreme(weight, valid, largest=True),
        "ratio_max": _extreme(ratio, valid, largest=True),
        "ratio_min": _extreme(ratio, valid, largest=False),
        **{k: _fraction(v, valid) for k, v in fractions.items()},
    }
    return weight, {k: v.detach() for k, v in metrics.items()}


def _require(name: str, rollout_logprobs: Tensor | None, cap: float | None, needs_cap: bool) -> None:
    if rollout_logprobs is None:
        raise ValueError(f"off-policy correction {name!r} weighs tokens by π_old/π_rollout but rollout_logprobs "
                         f"is None; pass the engine's log-probs (Experience.rollout_logprobs)")
    if needs_cap and (cap is None or cap <= 0):
        raise ValueError(f"off-policy correction {name!r} needs params.cap > 0 (algorithm.is_cap), got {cap!r}")


@register("off_policy", "none")
def none(old_logprobs: Tensor, rollout_logprobs: Tensor | None, mask: Tensor,
         params: OffPolicyParams) -> tuple[Tensor, dict[str, Tensor]]:
    """No correction: weight 1 on every token (π_rollout is taken to be π_old). (B, T) -> (B, T).

    Multiplying by exactly 1 leaves every loss and gradient bit-identical to no weight at all.
    """
    return torch.ones_like(mask, dtype=old_logprobs.dtype), {}


@register("off_policy", "tis")
def tis(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor,
        params: OffPolicyParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly
    Brings You Off-Policy RL Training"). (B, T) -> (B, T).

        w = min(ρ, C),   ρ = π_old / π_rollout

    Corrects the engine sampling from a slightly different distribution than the trainer
    computes (kernels, precision); truncating at C bounds the variance at the price of a small
    bias. Metric ``truncated_frac``: valid tokens with ρ > C.
    """
    _require("tis", rollout_logprobs, params.cap, needs_cap=True)
    valid = mask.bool()
    ratio = importance_ratio(old_logprobs, rollout_logprobs, mask, params.level, params.max_log_ratio)
    return _result(ratio.clamp(max=params.cap), ratio, valid, truncated_frac=ratio > params.cap)


@register("off_policy", "mis")
def mis(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor,
        params: OffPolicyParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Masked importance sampling (Liu, Li et al. 2025, "When Speed Kills Stability:
    Demystifying RL Collapse from the Training-Inference Mismatch"). (B, T) -> (B, T).

        w = ρ · 1[C_low <= ρ <= C],   C_low = params.floor, or 1 / C when unset (verl)

    Instead of trusting a token the engine and trainer disagree on with a truncated weight, drop
    it: truncation keeps a biased gradient from exactly those tokens, the mask removes them. At
    ``level`` ``sequence`` or ``geometric`` whole sequences are kept or dropped. Metric
    ``masked_frac``: valid tokens whose weight was zeroed.
    """
    _require("mis", rollout_logprobs, params.cap, needs_cap=True)
    floor = params.floor if params.floor is not None else 1.0 / params.cap
    if floor > params.cap:
        raise ValueError(f"mis: params.floor {floor} must not exceed params.cap {params.cap}")
    valid = mask.bool()
    ratio = importance_ratio(old_logprobs, rollout_logprobs, mask, params.level, params.max_log_ratio)
    outside = (ratio < floor) | (ratio > params.cap)
    return _result(torch.where(outside, torch.zeros_like(ratio), ratio), ratio, valid, masked_frac=outside)


@register("off_policy", "decoupled")
def decoupled(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor,
              params: OffPolicyParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Decoupled PPO (Hilton et al. 2021; AReaL, Fu et al. 2025, for asynchronous RL). (B, T) -> (B, T).

        w = ρ · 1[ρ <= C],   ρ = π_prox / π_behav   (no mask when C is None, AReaL's default)

    π_prox is ``old_logprobs`` (the trainer's weights at the step's start: the clip's anchor),
    π_behav the engine's ``rollout_logprobs`` (maybe k versions old). The policy loss clips
    π_θ/π_prox, so the update stays in a trust region around the current weights however stale
    the samples; w corrects for who sampled them. AReaL drops tokens above the cap rather than
    truncating them. Metric ``masked_frac`` (0 without a cap).
    """
    _require("decoupled", rollout_logprobs, params.cap, needs_cap=False)
    valid = mask.bool()
    ratio = importance_ratio(old_logprobs, rollout_logprobs, mask, params.level, params.max_log_ratio)
    above = ratio > params.cap if params.cap is not None else torch.zeros_like(valid)
    return _result(torch.where(above, torch.zeros_like(ratio), ratio), ratio, valid, masked_frac=above)

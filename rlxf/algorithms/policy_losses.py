"""Policy losses: per-token surrogate losses of the PPO family, one signature for all.

    token_loss, metrics = registry.get("policy_loss", name)(
        logprobs, old_logprobs, advantages, mask, params, rollout_logprobs)
    loss = registry.get("loss_agg", agg_name)(token_loss, mask, ...)

Inputs, all ``(B, T)`` over response tokens:

- ``logprobs``: log π_θ(a_t|s_t) of the policy being trained (carries the gradient);
- ``old_logprobs``: log π_old(a_t|s_t), the policy that made the batch (recomputed by the
  trainer; treated as a constant);
- ``advantages``: Â_t (a constant);
- ``mask``: 1 on trained tokens. Masked tokens contribute nothing: their loss is 0, their
  gradient is 0 (even if they hold inf or nan), and they are left out of every metric;
- ``params``: a ``PolicyLossParams``;
- ``rollout_logprobs``: log π_rollout(a_t|s_t) from the inference engine (or None), for a loss
  that needs the behaviour policy itself. The built-in losses do not read it: off-policy
  corrections (TIS, MIS, decoupled PPO) weight any loss's tokens, applied by the trainer's
  objective (see ``rlxf.algorithms.off_policy``).

Returns ``token_loss (B, T)`` (to be aggregated; 0 on masked tokens) and ``metrics``, a dict
of 0-dim detached tensors:

- ``clipfrac_low`` / ``clipfrac_high``: fraction of valid tokens whose gradient the lower /
  upper clip removed (or, for CISPO, whose IS weight was capped); 0 for losses that do not clip;
- ``approx_kl``: KL(π_old ‖ π_θ) by Schulman's k3, (r - 1) - log r with r = π_θ/π_old;
- ``ratio_mean`` / ``ratio_max`` / ``ratio_min``: the ratio the loss uses (sequence-level for
  GSPO) over valid tokens; max and min are 1 when no token is valid;
- dual_clip adds ``clipfrac_dual``.

Ratios are exp(log π_θ - log π_old) with the log-ratio clamped to ±``max_log_ratio`` before
``exp``: a token whose probability collapsed (or a -inf log-prob from a truncated sampler)
would otherwise give ``inf``, and ``inf · 0`` in a clipped branch or in the backward pass is
``nan``. Inside the clamp nothing changes. Beyond it the clamp is a deliberate bound, not a
no-op: its gradient is zero there, so such a token stops learning. For most clipped branches
that is what the clip would do anyway, but not for Â < 0 with r > 1 + ε_high, where
-Â r is neither clipped nor flat (dual_clip caps it at c·|Â|). GSPO averages the raw
per-token log-ratios and clamps only the sequence log-ratio, as the paper defines s_i.
Pass float32 log-probs (even from a bf16 model): exp of a bf16 log-ratio is off by ~1%, the
size of the clip range.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlxf.algorithms.masked import masked_count, masked_mean, summable_log_ratio, zero_masked
from rlxf.algorithms.registry import Needs, register

# Each built-in loss is -Â_t times a bounded factor, token by token: a sample with Â = 0 on every
# token adds exactly 0 to the loss and to its gradient, whatever the other samples hold.
_PER_TOKEN = Needs(zero_advantage_rows=False)


@dataclass(frozen=True)
class PolicyLossParams:
    """Hyperparameters of the policy losses (each uses the ones it names)."""

    clip_eps_low: float = 0.2      # ratio clipped below at 1 - clip_eps_low (ppo_clip, dual_clip, gspo)
    clip_eps_high: float = 0.2     # ratio clipped above at 1 + clip_eps_high (DAPO clip-higher: 0.28)
    dual_clip_c: float = 3.0       # dual_clip: loss of a negative-advantage token capped at c·|Â|
    cispo_eps_high: float = 5.0    # cispo: IS weight capped at 1 + cispo_eps_high
    max_log_ratio: float = 20.0    # |log ratio| clamp before exp (see module doc)


def _check_inputs(name: str, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
                  rollout_logprobs: Tensor | None) -> None:
    shapes = {"logprobs": logprobs, "old_logprobs": old_logprobs, "advantages": advantages, "mask": mask}
    if rollout_logprobs is not None:
        shapes["rollout_logprobs"] = rollout_logprobs
    if logprobs.dim() != 2 or any(t.shape != logprobs.shape for t in shapes.values()):
        got = ", ".join(f"{k} {tuple(v.shape)}" for k, v in shapes.items())
        raise ValueError(f"{name}: every input must have the same shape (B, T); got {got}")


def _log_ratio(logprobs: Tensor, old_logprobs: Tensor, valid: Tensor, params: PolicyLossParams) -> Tensor:
    """log π_θ - log π_old, 0 on masked tokens, clamped to ±max_log_ratio."""
    diff = zero_masked(logprobs, valid) - zero_masked(old_logprobs.detach(), valid)
    return diff.clamp(-params.max_log_ratio, params.max_log_ratio)


def _fraction(cond: Tensor, valid: Tensor) -> Tensor:
    return masked_mean(cond.to(torch.float32), valid).detach()


def _ratio_metrics(ratio: Tensor, log_ratio: Tensor, valid: Tensor) -> dict[str, Tensor]:
    ratio = ratio.detach()
    log_ratio = log_ratio.detach()
    any_valid = masked_count(valid) > 0
    one = torch.ones((), dtype=ratio.dtype, device=ratio.device)
    if ratio.numel():
        r_max = torch.where(valid, ratio, torch.full_like(ratio, -torch.inf)).amax()
        r_min = torch.where(valid, ratio, torch.full_like(ratio, torch.inf)).amin()
    else:
        r_max = r_min = one
    return {
        # expm1: in float32 exp(x) - 1 loses the digits that matter (3x too high at |x| = 1e-4)
        "approx_kl": masked_mean(torch.expm1(log_ratio) - log_ratio, valid),
        "ratio_mean": masked_mean(ratio, valid),
        "ratio_max": torch.where(any_valid, r_max, one),
        "ratio_min": torch.where(any_valid, r_min, one),
    }


def _clipped_surrogate(ratio: Tensor, adv: Tensor, valid: Tensor,
                       params: PolicyLossParams) -> tuple[Tensor, dict[str, Tensor]]:
    """max(-Â r, -Â clip(r, 1 - eps_low, 1 + eps_high)) and which clip was active."""
    low, high = 1.0 - params.clip_eps_low, 1.0 + params.clip_eps_high
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(low, high))
    metrics = {
        "clipfrac_low": _fraction((adv < 0) & (ratio < low), valid),
        "clipfrac_high": _fraction((adv > 0) & (ratio > high), valid),
    }
    return loss, metrics


def _finish(loss: Tensor, metrics: dict[str, Tensor], valid: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Zero the masked tokens' loss (and gradient)."""
    return zero_masked(loss, valid), metrics


@register("policy_loss", "ppo_clip", needs=_PER_TOKEN)
def ppo_clip(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
             params: PolicyLossParams, rollout_logprobs: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017) with decoupled bounds (DAPO, Yu et al. 2025).

        r_t = π_θ(a_t|s_t) / π_old(a_t|s_t)
        ℓ_t = max(-Â_t r_t, -Â_t clip(r_t, 1 - ε_low, 1 + ε_high))

    ε_high > ε_low ("clip-higher") leaves more room to raise unlikely tokens, which keeps
    entropy from collapsing. At r = 1, ℓ_t = -Â_t.
    """
    _check_inputs("ppo_clip", logprobs, old_logprobs, advantages, mask, rollout_logprobs)
    valid = mask.bool()
    adv = zero_masked(advantages.detach(), valid)
    log_ratio = _log_ratio(logprobs, old_logprobs, valid, params)
    ratio = log_ratio.exp()
    loss, metrics = _clipped_surrogate(ratio, adv, valid, params)
    metrics.update(_ratio_metrics(ratio, log_ratio, valid))
    return _finish(loss, metrics, valid)


@register("policy_loss", "dual_clip", needs=_PER_TOKEN)
def dual_clip(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
              params: PolicyLossParams, rollout_logprobs: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games").

        ℓ_t = ppo_clip_t                          if Â_t ≥ 0
        ℓ_t = min(ppo_clip_t, -c Â_t)             if Â_t < 0

    With Â < 0 and a ratio far above 1 the PPO loss -Â r grows without bound; the second
    clip caps it at c·|Â| (c = ``dual_clip_c`` > 1). Metric ``clipfrac_dual``: fraction of
    valid tokens where the cap is active.
    """
    _check_inputs("dual_clip", logprobs, old_logprobs, advantages, mask, rollout_logprobs)
    valid = mask.bool()
    adv = zero_masked(advantages.detach(), valid)
    log_ratio = _log_ratio(logprobs, old_logprobs, valid, params)
    ratio = log_ratio.exp()
    clipped, metrics = _clipped_surrogate(ratio, adv, valid, params)
    cap = -params.dual_clip_c * adv
    loss = torch.where(adv < 0, torch.minimum(clipped, cap), clipped)
    metrics["clipfrac_dual"] = _fraction((adv < 0) & (clipped > cap), valid)
    metrics.update(_ratio_metrics(ratio, log_ratio, valid))
    return _finish(loss, metrics, valid)


@register("policy_loss", "gspo", needs=_PER_TOKEN)
def gspo(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
         params: PolicyLossParams, rollout_logprobs: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Group sequence policy optimisation (Zheng et al. 2025), the GSPO-token form.

        s_i = exp( 1/|y_i| Σ_t log(π_θ(a_t|s_t) / π_old(a_t|s_t)) )     (length-normalised)
            (the raw per-token log-ratios are averaged; only log s_i is clamped to ±max_log_ratio)
        s_{i,t} = sg(s_i) · π_θ(a_t|s_t) / sg(π_θ(a_t|s_t))            (value s_i)
        ℓ_{i,t} = max(-Â_{i,t} s_{i,t}, -Â_{i,t} clip(s_{i,t}, 1 - ε_low, 1 + ε_high))

    Every token of a sequence carries the sequence ratio, so the whole sequence is clipped
    or not. Aggregated with ``seq_mean_token_mean`` and a sequence-level advantage this is
    exactly GSPO's objective and gradient. The paper's ε are small (3e-4 / 4e-4).
    """
    _check_inputs("gspo", logprobs, old_logprobs, advantages, mask, rollout_logprobs)
    valid = mask.bool()
    adv = zero_masked(advantages.detach(), valid)
    token_log_ratio = _log_ratio(logprobs, old_logprobs, valid, params)
    # The paper's s_i is the mean of the RAW log-ratios: clamping each token first would let
    # one collapsed token (log r = -30) count as -20 and move s_i by a factor e^(10/|y_i|).
    # Infinite log-probs (a truncated sampler) become huge finite values, so the mean still
    # reaches the sequence clamp instead of turning into inf - inf = nan; a nan log-prob stays nan.
    raw = summable_log_ratio(logprobs.detach(), old_logprobs.detach(), valid)
    seq_log_ratio = masked_mean(raw, valid, dim=-1, keepdim=True)
    # π/sg(π) carries the gradient; an infinite log-prob has none to give (and -inf - -inf is nan)
    logp = zero_masked(logprobs, valid & torch.isfinite(logprobs))
    log_ratio = (seq_log_ratio + logp - logp.detach()).clamp(-params.max_log_ratio, params.max_log_ratio)
    ratio = log_ratio.exp()
    loss, metrics = _clipped_surrogate(ratio, adv, valid, params)
    metrics.update(_ratio_metrics(ratio, token_log_ratio, valid))
    return _finish(loss, metrics, valid)


@register("policy_loss", "cispo", needs=_PER_TOKEN)
def cispo(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
          params: PolicyLossParams, rollout_logprobs: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped IS-weight policy optimisation (MiniMax 2025, "MiniMax-M1").

        w_t = sg(min(r_t, 1 + ε_high^IS))
        ℓ_t = -w_t Â_t · π_θ(a_t|s_t) / sg(π_θ(a_t|s_t))        (value -w_t Â_t, gradient -w_t Â_t ∇log π_θ)

    Unlike PPO, no token loses its gradient: the IS weight is clipped and detached instead of
    the update, so rare tokens that drive reflective reasoning keep learning. Metric
    ``clipfrac_high``: fraction of valid tokens whose weight was capped (any sign of Â).
    """
    _check_inputs("cispo", logprobs, old_logprobs, advantages, mask, rollout_logprobs)
    valid = mask.bool()
    adv = zero_masked(advantages.detach(), valid)
    log_ratio = _log_ratio(logprobs, old_logprobs, valid, params)
    ratio = log_ratio.exp()
    cap = 1.0 + params.cispo_eps_high
    weight = ratio.detach().clamp(max=cap)
    # π/sg(π) carries the gradient; an infinite log-prob has none to give (and -inf - -inf is nan)
    logp = zero_masked(logprobs, valid & torch.isfinite(logprobs))
    loss = -adv * weight * torch.exp(logp - logp.detach())
    metrics = {
        "clipfrac_low": _fraction(torch.zeros_like(valid), valid),
        "clipfrac_high": _fraction(ratio > cap, valid),
    }
    metrics.update(_ratio_metrics(ratio, log_ratio, valid))
    return _finish(loss, metrics, valid)


@register("policy_loss", "vanilla", needs=_PER_TOKEN)
def vanilla(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
            params: PolicyLossParams, rollout_logprobs: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Vanilla (importance-weighted) policy gradient, no clipping (Williams 1992).

        ℓ_t = -Â_t r_t,   r_t = π_θ(a_t|s_t) / π_old(a_t|s_t)

    On-policy (π_θ = π_old) the gradient is -Â_t ∇log π_θ(a_t|s_t), plain REINFORCE; over
    several epochs the ratio keeps the estimate unbiased but unbounded.
    """
    _check_inputs("vanilla", logprobs, old_logprobs, advantages, mask, rollout_logprobs)
    valid = mask.bool()
    adv = zero_masked(advantages.detach(), valid)
    log_ratio = _log_ratio(logprobs, old_logprobs, valid, params)
    ratio = log_ratio.exp()
    zero = _fraction(torch.zeros_like(valid), valid)
    metrics = {"clipfrac_low": zero, "clipfrac_high": zero.clone()}
    metrics.update(_ratio_metrics(ratio, log_ratio, valid))
    return _finish(-adv * ratio, metrics, valid)

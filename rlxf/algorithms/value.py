"""The critic's loss (PPO with a learned value function)."""

from __future__ import annotations

import torch
from torch import Tensor

from rlxf.algorithms.masked import masked_mean, masked_var, safe_divide, zero_masked


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor,
               clip: float | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped squared error of the value head (Schulman et al. 2017; clipping as in OpenAI
    baselines' PPO2). All inputs (B, T); returns ``token_loss (B, T)`` and metrics.

        ℓ_t = ½ (V_t - R_t)²                                            clip = None
        ℓ_t = ½ max((V_t - R_t)², (V_old,t + clip(V_t - V_old,t, -c, c) - R_t)²)   clip = c

    ``values`` V carry the gradient; ``old_values`` (the critic when the batch was made) and
    ``returns`` R (from the advantage estimator) are constants. Aggregate ``token_loss`` with
    the same loss_agg as the policy. Masked tokens are 0, with gradient 0.
    Metrics (0-dim, detached): ``vf_clipfrac`` (fraction of valid tokens where the clipped
    term is the larger), ``vf_explained_var`` = 1 - Var(R - V) / Var(R) (0 when Var(R) = 0),
    ``value_mean``, ``return_mean``.
    """
    shapes = {"values": values, "old_values": old_values, "returns": returns, "mask": mask}
    if values.dim() != 2 or any(t.shape != values.shape for t in shapes.values()):
        got = ", ".join(f"{k} {tuple(v.shape)}" for k, v in shapes.items())
        raise ValueError(f"value_loss: every input must have the same shape (B, T); got {got}")
    if clip is not None and clip <= 0:
        raise ValueError(f"value_loss: clip must be > 0 or None, got {clip}")
    valid = mask.bool()
    values = zero_masked(values, valid)
    old_values = zero_masked(old_values.detach(), valid)
    returns = zero_masked(returns.detach(), valid)
    unclipped = (values - returns).square()
    if clip is None:
        loss = 0.5 * unclipped
        clipfrac = torch.zeros((), dtype=values.dtype, device=values.device)
    else:
        v_clipped = old_values + (values - old_values).clamp(-clip, clip)
        clipped = (v_clipped - returns).square()
        loss = 0.5 * torch.maximum(unclipped, clipped)
        clipfrac = masked_mean((clipped > unclipped).to(values.dtype), valid).detach()
    v = values.detach()
    metrics = {
        "vf_clipfrac": clipfrac,
        "vf_explained_var": explained_variance(returns, v, valid),
        "value_mean": masked_mean(v, valid),
        "return_mean": masked_mean(returns, valid),
    }
    return zero_masked(loss, valid), metrics


def explained_variance(returns: Tensor, values: Tensor, mask: Tensor) -> Tensor:
    """1 - Var(R - V) / Var(R) over the valid tokens of (B, T) ``returns`` and ``values``; 0 when
    Var(R) = 0. Detached, 0-dim.

    Not a mean of per-token terms: the explained variance of a batch is not a combination of its
    parts' (a micro-batch of one sequence has its own variance). Compute it over the whole batch
    the metric describes, e.g. a mini-batch's values gathered from its micro-batches.
    """
    valid = mask.bool()
    returns = zero_masked(returns.detach(), valid)
    values = zero_masked(values.detach(), valid)
    var_returns = masked_var(returns, valid)
    return torch.where(var_returns > 0, 1 - safe_divide(masked_var(returns - values, valid), var_returns),
                       torch.zeros_like(var_returns))

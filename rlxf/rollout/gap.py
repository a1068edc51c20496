"""The engine/trainer log-prob gap: the per-step check that rollout and training agree.

The engine reports log π_rollout(a_t|s_t) while sampling; the trainer recomputes
log π_old(a_t|s_t) with the same weights (``rlxf.models.logprobs.sequence_logprobs``). With
identical weights the two differ only by numerics (fp32 CPU: < 1e-4); a larger gap means the
engine runs stale or differently-computed weights, and the importance ratios of the policy loss
are then off by exp(gap).
"""

from __future__ import annotations

import torch


def logprob_gap(engine_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Max and mean of |engine - trainer| over the tokens where ``mask`` is 1.

    All inputs (B, T); returns 0-dim float tensors ``max_abs`` and ``mean_abs`` (0 when the
    mask is empty).
    """
    diff = (engine_logprobs.float() - trainer_logprobs.float()).abs() * mask
    count = mask.sum()
    return {
        "max_abs": diff.max() if diff.numel() else diff.new_zeros(()),
        "mean_abs": diff.sum() / count.clamp(min=1),
    }

"""Statistics over groups of samples that answer the same prompt (GRPO, RLOO, DAPO).

``group_ids (B,)`` is a long tensor; samples with equal ids form a group. Ids need not be
contiguous or sorted, and groups may differ in size.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must have shape (B,), got {tuple(group_ids.shape)}")
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, uniq.numel()


def group_mean_std(scores: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each sample's group mean, group std and group size, all ``(B,)``.

    scores: (B,) one number per sample. group_ids: (B,) long.
    The std is unbiased (divides by n - 1); a group of one sample has std 0.
    """
    if scores.shape != group_ids.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and group_ids {tuple(group_ids.shape)} must both be (B,)"
        )
    inverse, n_groups = _group_index(group_ids)
    zeros = scores.new_zeros(n_groups)
    size = zeros.index_add(0, inverse, torch.ones_like(scores))
    mean = zeros.index_add(0, inverse, scores) / size.clamp(min=1)
    dev = scores - mean[inverse]
    var = zeros.index_add(0, inverse, dev * dev) / (size - 1).clamp(min=1)
    return mean[inverse], var.sqrt()[inverse], size[inverse]


def dynamic_sampling_keep(scores: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO dynamic sampling (Yu et al. 2025): which samples to keep, ``(B,)`` bool.

    A group whose scores are all equal (every answer right, or every answer wrong) has zero
    advantage under any group baseline and contributes no gradient, so its samples are
    dropped and the batch is refilled with more prompts. True for samples of groups whose
    scores are not all equal; groups of one sample are never kept.
    """
    high, low, inverse = _group_range(scores, group_ids)
    return (high > low)[inverse]


def zero_variance_fraction(scores: Tensor, group_ids: Tensor) -> Tensor:
    """Fraction of groups whose scores are all equal, ``()`` (0 for an empty batch).

    Such a group has zero advantage under any group baseline: it carries no learning signal.
    When most groups are like that (a task too hard or too easy for the policy), RL barely
    learns; groups of one sample count as zero-variance.
    """
    if scores.numel() == 0:
        return scores.new_zeros(())
    high, low, _ = _group_range(scores, group_ids)
    return (high == low).to(scores.dtype).mean()


def _group_range(scores: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each group's max and min score, ``(G,)`` each, and each sample's group index ``(B,)``."""
    if scores.shape != group_ids.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and group_ids {tuple(group_ids.shape)} must both be (B,)"
        )
    inverse, n_groups = _group_index(group_ids)
    empty = scores.new_zeros(n_groups)
    high = empty.scatter_reduce(0, inverse, scores, reduce="amax", include_self=False)
    low = empty.scatter_reduce(0, inverse, scores, reduce="amin", include_self=False)
    return high, low, inverse

"""Statistics over groups of samples that answer the same prompt (GRPO, RLOO, DAPO).

``group_ids (B,)`` is a long tensor; samples with equal ids form a group. Ids need not be
contiguous or sorted, and groups may differ in size.

``valid (B,)`` (bool, optional) says which samples are members: a sample the model wrote no
trainable token of (an episode that failed before or while the model spoke keeps its tokens
with loss_mask 0, and reward 0) is not an answer to the prompt, and counting its 0 would make
signal where the answers agree. Statistics are over valid samples only; a group without any
has no signal.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlxf.algorithms.masked import float_dtype


def _group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must have shape (B,), got {tuple(group_ids.shape)}")
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, uniq.numel()


def group_mean_std(scores: Tensor, group_ids: Tensor, valid: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Each sample's group mean, group std and group size (over the group's valid samples),
    all ``(B,)``, in ``scores``' dtype (float32 for integer or bool scores: a mean of 0.5 is no
    integer).

    scores: (B,) one number per sample. group_ids: (B,) long. valid: (B,) bool, or None (all).
    The std is unbiased (divides by n - 1); a group of one sample has std 0. The sums run in
    float64, so rewards of any finite size give a finite std.
    """
    _check_shapes(scores, group_ids, valid)
    inverse, n_groups = _group_index(group_ids)
    ok = torch.ones_like(scores, dtype=torch.bool) if valid is None else valid.bool()
    x = scores.double().where(ok, 0.0)  # where, not a product: an invalid sample's nan stays out
    zeros = x.new_zeros(n_groups)
    size = zeros.index_add(0, inverse, ok.to(x.dtype))
    mean = zeros.index_add(0, inverse, x) / size.clamp(min=1)
    dev = (x - mean[inverse]).where(ok, 0.0)
    var = zeros.index_add(0, inverse, dev * dev) / (size - 1).clamp(min=1)
    return tuple(t[inverse].to(float_dtype(scores)) for t in (mean, var.sqrt(), size))


def dynamic_sampling_keep(scores: Tensor, group_ids: Tensor, valid: Tensor | None = None,
                          trained: Tensor | None = None) -> Tensor:
    """DAPO dynamic sampling (Yu et al. 2025): which samples to keep, ``(B,)`` bool.

    A group whose scores are all equal (every answer right, or every answer wrong) has zero
    advantage under any group baseline and contributes no gradient, so its samples are
    dropped and the batch is refilled with more prompts. True for samples of groups whose
    valid scores are not all equal; groups of one valid sample are never kept.

    ``trained (B,)`` bool, optional: the valid samples whose tokens the loss trains on
    (``algorithm.mask_truncated`` masks the truncated ones, which still count in their group's
    mean). A group is kept only if one of them scores off that mean, so has a non-zero
    advantage: scores [1, 0, 0] with the 0s masked are kept (the 1 is pushed up), a group whose
    samples are all masked is not, whatever its scores. None: every valid sample is trained.
    """
    high, low, inverse = _group_range(scores, group_ids, valid)
    keep = (high > low)[inverse]
    if trained is None:
        return keep
    _check_shapes(scores, group_ids, trained)
    # in the dtype the estimators compute S - mean_g(S) in: float32 scores 0.1, 0.2, 0.3 have a
    # float64 mean just off 0.2, but a float32 mean of exactly 0.2, and GRPO gives the 0.2 Â = 0
    x = scores.to(float_dtype(scores))
    mean, _, _ = group_mean_std(x, group_ids, valid)
    ok = trained.bool() if valid is None else trained.bool() & valid.bool()
    signal = ok & (x != mean)
    has = x.new_zeros(len(high)).index_add(0, inverse, signal.to(x.dtype)) > 0
    return keep & has[inverse]


def zero_variance_fraction(scores: Tensor, group_ids: Tensor, valid: Tensor | None = None) -> Tensor:
    """Fraction of groups whose valid scores are all equal, ``()`` in a float dtype (0 for an
    empty batch).

    Such a group has zero advantage under any group baseline: it carries no learning signal.
    When most groups are like that (a task too hard or too easy for the policy), RL barely
    learns; groups of one valid sample (or none) count as zero-variance.
    """
    if scores.numel() == 0:
        return scores.new_zeros((), dtype=float_dtype(scores))
    high, low, _ = _group_range(scores, group_ids, valid)
    return (~(high > low)).to(float_dtype(scores)).mean()


def _check_shapes(scores: Tensor, group_ids: Tensor, valid: Tensor | None) -> None:
    if not isinstance(group_ids, Tensor):
        raise ValueError(f"group_ids must be a (B,) long tensor, one id per prompt shared by its samples; "
                         f"got {type(group_ids).__name__}")
    if scores.shape != group_ids.shape or (valid is not None and valid.shape != scores.shape):
        extra = "" if valid is None else f" and valid {tuple(valid.shape)}"
        raise ValueError(
            f"scores {tuple(scores.shape)}, group_ids {tuple(group_ids.shape)}{extra} must all be (B,)"
        )


def _group_range(scores: Tensor, group_ids: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Each group's max and min valid score, ``(G,)`` each (max < min for a group without a
    valid sample), and each sample's group index ``(B,)``."""
    _check_shapes(scores, group_ids, valid)
    inverse, n_groups = _group_index(group_ids)
    x = scores.double()
    ok = torch.ones_like(x, dtype=torch.bool) if valid is None else valid.bool()
    high = x.new_full((n_groups,), -math.inf).scatter_reduce(0, inverse, x.masked_fill(~ok, -math.inf), reduce="amax")
    low = x.new_full((n_groups,), math.inf).scatter_reduce(0, inverse, x.masked_fill(~ok, math.inf), reduce="amin")
    return high, low, inverse

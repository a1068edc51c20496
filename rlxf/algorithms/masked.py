"""Reductions over the valid entries of a padded tensor.

A mask marks valid entries with a nonzero value (bool or 0/1 float); everything else is
padding or environment tokens. These helpers select with ``torch.where`` rather than multiply
by the mask, so a masked entry holding ``inf`` or ``nan`` changes neither the value nor the
gradient (``0 * inf`` would be ``nan``). A reduction over no valid entries returns 0, never
``nan``.

``masked_var`` and ``masked_whiten`` compute in float64 and return ``x``'s dtype (the default
float dtype for integer or bool ``x``: a variance or a whitened value is no integer). In float32
the mean of equal values can be off by a rounding error; the variance would be that error
squared rather than 0, and whitening would divide the error by a std of the same size, giving
a batch whose rewards all agree advantages near ±1 instead of 0. float64 sums equal float32
values exactly, and squares deviations up to 1e154 without overflow (float32: 1.8e19).
"""

from __future__ import annotations

import torch
from torch import Tensor


def float_dtype(x: Tensor) -> torch.dtype:
    """``x``'s dtype if it is a float one, else the default float dtype (float32)."""
    return torch.result_type(x, 1.0)


def zero_masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` with masked entries replaced by 0 (gradient 0 there too). Same shape as ``x``."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Σ x over valid entries, over ``dim`` (all dims when None)."""
    x = zero_masked(x, mask)
    return x.sum() if dim is None else x.sum(dim=dim, keepdim=keepdim)


def masked_count(mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Number of valid entries (float), over ``dim`` (all dims when None)."""
    valid = mask.bool().to(mask.dtype if mask.is_floating_point() else torch.float32)
    return valid.sum() if dim is None else valid.sum(dim=dim, keepdim=keepdim)


def safe_divide(num: Tensor, den: Tensor | float) -> Tensor:
    """``num / den`` with 0 wherever ``den == 0`` (an empty reduction has mean 0, not nan)."""
    den = torch.as_tensor(den, dtype=num.dtype, device=num.device)
    ok = den != 0
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))


def summable_log_ratio(logp: Tensor, other: Tensor, mask: Tensor) -> Tensor:
    """``logp - other`` on valid entries (0 elsewhere), safe to sum or average over a row. (B, T).

    ±inf (a token one side calls impossible) becomes ±finfo.max / (2T), so a row's sum stays
    finite and still reaches any clamp; -inf - -inf (impossible under both) is 0. A nan input
    stays nan: a broken forward must fail the step loudly, not read as the two policies agreeing.
    """
    valid = mask.bool()
    logp, other = zero_masked(logp, valid), zero_masked(other, valid)
    both_inf = torch.isinf(logp) & (logp == other)
    diff = torch.where(both_inf, torch.zeros_like(logp), logp - other)
    big = torch.finfo(diff.dtype).max / max(diff.shape[-1], 1) / 2
    return diff.clamp(-big, big)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Mean of x over valid entries: Σ m·x / Σ m; 0 where there are none."""
    count = masked_count(mask, dim, keepdim).to(x.dtype)
    return safe_divide(masked_sum(x, mask, dim, keepdim), count)


def masked_var(x: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False,
               unbiased: bool = True) -> Tensor:
    """Variance of x over valid entries; Bessel-corrected when ``unbiased``.

    0 where there are fewer than two valid entries (unbiased) or none (biased); computed in
    float64 (module doc), returned in ``float_dtype(x)``.
    """
    x64 = x.double()
    mean = masked_mean(x64, mask, dim, keepdim=True)
    sq = masked_sum((x64 - mean) ** 2, mask, dim, keepdim)
    count = masked_count(mask, dim, keepdim).to(x64.dtype)
    if unbiased:
        count = torch.where(count > 1, count - 1, torch.zeros_like(count))
    return safe_divide(sq, count).to(float_dtype(x))


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Normalise x by the mean and std of its valid entries (all of them, across every dim).

        x̂ = (x - mean) / (std + eps)

    With ``shift_mean=False`` only the scale changes: ``x̂ = (x - mean) / (std + eps) + mean``.
    Masked entries of the result are 0. The std is unbiased (see ``masked_var``); with a single
    valid entry it is 0 and x̂ = 0 there (``x - mean = 0``), never nan; so are equal entries
    (computed in float64: module doc). Returned in ``float_dtype(x)``.
    """
    x64 = x.double()
    mean = masked_mean(x64, mask)
    std = masked_var(x64, mask).sqrt()
    out = (x64 - mean) / (std + eps)
    if not shift_mean:
        out = out + mean
    return zero_masked(out.to(float_dtype(x)), mask)

"""Entropy of the policy's next-token distribution, from logits."""

from __future__ import annotations

import torch
from torch import Tensor


def _entropy(logits: Tensor) -> Tensor:
    logp = torch.log_softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, -1)
    p = logp.exp()
    # p·log p with 0·log 0 = 0: a -inf logit (a banned token) would otherwise give 0·(-inf) = nan.
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)


def entropy_from_logits(logits: Tensor, chunk_size: int | None = None) -> Tensor:
    """H = -Σ_v p_v log p_v with p = softmax(logits), over the last dim. (..., V) -> (...).

    Computed as log-softmax (stable for large logits), in float32 for half-precision input.
    It only reduces the last dim, so it can be called on any slice of rows (chunks of tokens)
    and the pieces concatenated. ``chunk_size``: process that many rows at a time so only one
    chunk's float32 copy of the logits exists at once (useful for logging under no_grad; with
    autograd each chunk's intermediates are still kept for the backward pass).
    """
    if chunk_size is None or logits.dim() < 2:
        return _entropy(logits)
    if chunk_size < 1:
        raise ValueError(f"entropy_from_logits: chunk_size must be >= 1, got {chunk_size}")
    rows = logits.reshape(-1, logits.shape[-1])
    parts = [_entropy(chunk) for chunk in rows.split(chunk_size)]
    out = torch.cat(parts) if parts else rows.new_zeros(0, dtype=torch.float32)
    return out.reshape(logits.shape[:-1])

"""Reward shaping before the advantages: where an outcome reward goes, the DAPO length penalty."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def outcome_token_rewards(scores: Tensor, mask: Tensor) -> Tensor:
    """Put each sample's outcome reward on its last valid token. (B,), (B, T) -> (B, T).

    Every other position is 0; a row with no valid token gets nothing. This is the
    ``rewards`` input the advantage estimators expect for outcome-rewarded tasks.
    """
    if mask.dim() != 2 or scores.shape != mask.shape[:1]:
        raise ValueError(f"outcome_token_rewards: scores {tuple(scores.shape)} must be (B,) for mask "
                         f"{tuple(mask.shape)} (B, T)")
    valid = mask.bool()
    count = valid.sum(-1, keepdim=True)
    last = valid & (valid.cumsum(-1) == count)  # the valid position where the running count is complete
    return torch.where(last, scores[:, None].to(torch.result_type(scores, 1.0)), 0.0)


def soft_overlong_penalty(lengths: Tensor, max_len: int, buffer_len: int, penalty: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment (Yu et al. 2025, eq. 13). (B,) lengths -> (B,) rewards to add.

        R(|y|) = 0                                  |y| ≤ L_max - L_buf
        R(|y|) = ((L_max - L_buf) - |y|) / L_buf · p     L_max - L_buf < |y| ≤ L_max
        R(|y|) = -p                                 |y| > L_max

    with L_max = ``max_len``, L_buf = ``buffer_len`` and p = ``penalty``: the penalty grows
    linearly over the last ``buffer_len`` tokens, so a truncated response is punished by how
    far it ran over rather than all at once. ``buffer_len`` 0 turns it off (all zeros).
    The config gives the buffer as a fraction of max_new_tokens: ``overlong_buffer_tokens``.
    """
    if buffer_len < 0 or buffer_len > max_len:
        raise ValueError(f"soft_overlong_penalty: need 0 <= buffer_len <= max_len, got {buffer_len}, {max_len}")
    lengths = lengths.to(torch.result_type(lengths, 1.0))
    if buffer_len == 0:
        return torch.zeros_like(lengths)
    expected = max_len - buffer_len
    return ((expected - lengths) / buffer_len).clamp(-1.0, 0.0) * penalty


def overlong_buffer_tokens(fraction: float, max_len: int) -> int:
    """The soft overlong buffer in tokens, ⌊f · max_len⌋, for the fraction f the config gives.

    The product is rounded to 9 decimals before the floor: in floats 0.29 · 100 is
    28.999999999999996, and ``int`` of it would start the penalty one token late.
    """
    return math.floor(round(fraction * max_len, 9))

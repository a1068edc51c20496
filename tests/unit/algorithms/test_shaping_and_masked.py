"""Reward shaping helpers and masked reductions."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from rlxf.algorithms import (
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    outcome_token_rewards,
    soft_overlong_penalty,
)

D = torch.float64


def test_outcome_reward_lands_on_the_last_valid_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    out = outcome_token_rewards(torch.tensor([1.0, 2.0, 3.0, 4.0]), mask)
    expected = torch.tensor([[0, 0, 1.0, 0], [0, 0, 2.0, 0], [0, 0, 0, 0], [0, 0, 0, 4.0]])
    torch.testing.assert_close(out, expected)  # row 2 has no valid token: its reward has nowhere to go


def test_soft_overlong_penalty_by_hand():
    # L_max = 20, L_buf = 4, p = 1: free up to 16; then (16 - |y|)/4: 17 -> -0.25, 18 -> -0.5, 20 -> -1
    lengths = torch.tensor([10, 16, 17, 18, 20, 25])
    out = soft_overlong_penalty(lengths, max_len=20, buffer_len=4, penalty=1.0)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0]))
    # penalty 0.5 scales it; buffer 0 turns it off
    torch.testing.assert_close(soft_overlong_penalty(lengths, 20, 4, 0.5), out * 0.5)
    assert soft_overlong_penalty(lengths, 20, 0, 1.0).abs().sum() == 0
    with pytest.raises(ValueError, match="buffer_len"):
        soft_overlong_penalty(lengths, 20, 21, 1.0)


def test_masked_reductions_by_hand():
    x = torch.tensor([[1.0, 2.0, math.inf], [4.0, math.nan, 6.0]], dtype=D)
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]], dtype=D)
    assert masked_sum(x, mask).item() == 13.0                                  # 1 + 2 + 4 + 6
    assert masked_mean(x, mask).item() == 3.25                                 # 13 / 4
    torch.testing.assert_close(masked_mean(x, mask, dim=-1), torch.tensor([1.5, 5.0], dtype=D))
    assert masked_var(x, mask).item() == pytest.approx(statistics.variance([1, 2, 4, 6]))
    assert masked_var(x, mask, unbiased=False).item() == pytest.approx(statistics.pvariance([1, 2, 4, 6]))
    w = masked_whiten(x, mask, eps=0.0)
    std = statistics.stdev([1, 2, 4, 6])
    torch.testing.assert_close(w, torch.tensor([[(1 - 3.25) / std, (2 - 3.25) / std, 0],
                                                [(4 - 3.25) / std, 0, (6 - 3.25) / std]], dtype=D))
    w = masked_whiten(x, mask, shift_mean=False, eps=0.0)
    assert w[0, 0].item() == pytest.approx((1 - 3.25) / std + 3.25)


def test_empty_reductions_are_zero():
    x = torch.tensor([[math.nan, 1.0]])
    mask = torch.zeros(1, 2)
    for value in (masked_sum(x, mask), masked_mean(x, mask), masked_var(x, mask), masked_whiten(x, mask).sum()):
        assert value.item() == 0.0
    # a single valid entry: unbiased variance 0, whitened 0
    one = torch.tensor([[0.0, 1.0]])
    assert masked_var(x, one).item() == 0.0 and masked_whiten(x, one).abs().sum() == 0

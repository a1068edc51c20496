"""Loss aggregation modes, hand-derived, and exact gradient accumulation over micro-batches."""

from __future__ import annotations

import pytest
import torch

from rlxf.algorithms import (
    loss_totals,
    names,
    registry,
    seq_mean_token_mean,
    seq_mean_token_sum,
    seq_mean_token_sum_norm,
    token_mean,
)

D = torch.float64
X = 99.0

# rows: sums 10, 11, 7 over 4, 2, 1 valid tokens (means 2.5, 5.5, 7); row 3 is fully masked
LOSS = torch.tensor([[1, 2, 3, 4], [5, 6, X, X], [7, X, X, X], [X, X, X, X]], dtype=D)
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=D)


def test_modes_by_hand():
    assert token_mean(LOSS, MASK).item() == pytest.approx(28 / 7)                    # (10+11+7)/7 = 4
    assert seq_mean_token_mean(LOSS, MASK).item() == pytest.approx((2.5 + 5.5 + 7) / 3)  # 5
    assert seq_mean_token_sum(LOSS, MASK).item() == pytest.approx(28 / 3)              # 9.333
    assert seq_mean_token_sum_norm(LOSS, MASK, norm=4).item() == pytest.approx(28 / (3 * 4))  # 2.333


def test_explicit_totals_override_the_batch():
    assert token_mean(LOSS, MASK, num_tokens=14).item() == pytest.approx(28 / 14)
    assert seq_mean_token_mean(LOSS, MASK, num_seqs=6).item() == pytest.approx(15 / 6)
    assert seq_mean_token_sum(LOSS, MASK, num_seqs=torch.tensor(4.0)).item() == pytest.approx(7.0)
    assert seq_mean_token_sum_norm(LOSS, MASK, num_seqs=7, norm=2).item() == pytest.approx(2.0)


def test_loss_totals_count_rows_with_tokens():
    num_tokens, num_seqs = loss_totals(MASK)
    assert num_tokens.item() == 7 and num_seqs.item() == 3  # the fully masked row is not a sequence


@pytest.mark.parametrize("name", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum",
                                  "seq_mean_token_sum_norm"])
def test_micro_batches_sum_to_the_mini_batch(name):
    agg = registry.get("loss_agg", name)
    num_tokens, num_seqs = loss_totals(MASK)
    full = agg(LOSS, MASK, norm=4)
    parts = [agg(LOSS[i:i + 2], MASK[i:i + 2], num_tokens=num_tokens, num_seqs=num_seqs, norm=4)
             for i in (0, 2)]
    torch.testing.assert_close(sum(parts), full)
    # and a different split (3 + 1) gives the same
    parts = [agg(LOSS[:3], MASK[:3], num_tokens=num_tokens, num_seqs=num_seqs, norm=4),
             agg(LOSS[3:], MASK[3:], num_tokens=num_tokens, num_seqs=num_seqs, norm=4)]
    torch.testing.assert_close(sum(parts), full)


def test_gradients_by_hand():
    loss = LOSS.clone().requires_grad_(True)
    token_mean(loss, MASK).backward()
    # ∂/∂ℓ_it = m_it / 7
    torch.testing.assert_close(loss.grad, MASK / 7)
    loss.grad = None
    seq_mean_token_mean(loss, MASK).backward()
    # ∂/∂ℓ_it = m_it / (|y_i| · 3): 1/12 on row 0, 1/6 on row 1, 1/3 on row 2
    expected = MASK * torch.tensor([[1 / 12], [1 / 6], [1 / 3], [0.0]], dtype=D)
    torch.testing.assert_close(loss.grad, expected)


def test_norm_is_required_for_the_constant_normaliser():
    with pytest.raises(ValueError, match="needs norm > 0"):
        seq_mean_token_sum_norm(LOSS, MASK)


def test_empty_batch_is_zero_not_nan():
    for name in names("loss_agg"):
        out = registry.get("loss_agg", name)(LOSS, torch.zeros_like(MASK), norm=4)
        assert out.item() == 0.0, name


def test_shape_mismatch():
    with pytest.raises(ValueError, match="token_loss"):
        token_mean(LOSS, MASK[:, :2])

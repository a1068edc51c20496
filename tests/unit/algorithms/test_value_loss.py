"""The critic's clipped value loss, hand-derived."""

from __future__ import annotations

import statistics

import pytest
import torch

from rlxf.algorithms import value_loss

D = torch.float64
X = 99.0

# clip c = 0.2
# tok 0: V 1.0, V_old 0.5, R 1.2: (1-1.2)² = 0.04; V_c = 0.5 + 0.2 = 0.7, (0.7-1.2)² = 0.25 -> ½·0.25 = 0.125
#        the clipped term wins and is flat in V: gradient 0
# tok 1: V 0.6, V_old 0.5, R 1.0: inside the clip, both terms (0.6-1)² = 0.16 -> 0.08, grad V - R = -0.4
# tok 2: V 0.0, V_old 0.5, R 0.0: 0; V_c = 0.3, 0.09 -> 0.045, gradient 0
# tok 3: V 1.0, V_old 0.5, R 0.0: (1-0)² = 1; V_c = 0.7, 0.49 -> ½·1 = 0.5, grad V - R = 1
VALUES = [1.0, 0.6, 0.0, 1.0, X]
OLD = [0.5, 0.5, 0.5, 0.5, -X]
RETURNS = [1.2, 1.0, 0.0, 0.0, X]
MASK = torch.tensor([[1, 1, 1, 1, 0]], dtype=D)


def run(clip):
    v = torch.tensor([VALUES], dtype=D, requires_grad=True)
    loss, m = value_loss(v, torch.tensor([OLD], dtype=D), torch.tensor([RETURNS], dtype=D), MASK, clip)
    loss.sum().backward()
    return loss.detach()[0], v.grad[0], m


def test_clipped_by_hand():
    loss, grad, m = run(0.2)
    torch.testing.assert_close(loss, torch.tensor([0.125, 0.08, 0.045, 0.5, 0.0], dtype=D))
    torch.testing.assert_close(grad, torch.tensor([0.0, -0.4, 0.0, 1.0, 0.0], dtype=D))
    assert m["vf_clipfrac"].item() == pytest.approx(2 / 4)


def test_unclipped_by_hand():
    # ½ (V - R)² = 0.02, 0.08, 0, 0.5 ; gradient V - R = -0.2, -0.4, 0, 1
    loss, grad, m = run(None)
    torch.testing.assert_close(loss, torch.tensor([0.02, 0.08, 0.0, 0.5, 0.0], dtype=D))
    torch.testing.assert_close(grad, torch.tensor([-0.2, -0.4, 0.0, 1.0, 0.0], dtype=D))
    assert m["vf_clipfrac"].item() == 0.0


def test_metrics():
    _, _, m = run(0.2)
    # explained variance 1 - Var(R - V)/Var(R) over the 4 valid tokens
    r, v = RETURNS[:4], VALUES[:4]
    expected = 1 - statistics.variance([a - b for a, b in zip(r, v, strict=True)]) / statistics.variance(r)
    assert m["vf_explained_var"].item() == pytest.approx(expected)  # 1 - 1.16/1.23 = 0.0569
    assert m["value_mean"].item() == pytest.approx(sum(v) / 4)
    assert m["return_mean"].item() == pytest.approx(sum(r) / 4)


def test_constant_returns_and_empty_batch_do_not_nan():
    z = torch.zeros(2, 3)
    _, m = value_loss(z, z, z, torch.ones(2, 3), 0.2)
    assert m["vf_explained_var"].item() == 0.0
    loss, m = value_loss(z, z, z, torch.zeros(2, 3), 0.2)
    assert torch.equal(loss, z) and all(torch.isfinite(x) for x in m.values())


def test_bad_inputs():
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="clip must be > 0"):
        value_loss(z, z, z, z, 0.0)
    with pytest.raises(ValueError, match=r"returns \(2, 2\)"):
        value_loss(z, z, torch.zeros(2, 2), z, 0.2)

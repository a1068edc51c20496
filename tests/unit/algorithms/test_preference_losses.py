"""DPO family, SimPO and Bradley–Terry, hand-derived."""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.algorithms import bradley_terry_loss, dpo_loss, simpo_loss

D = torch.float64


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))  # -log σ(-x)


def t(*xs):
    return torch.tensor(xs, dtype=D)


# policy chosen -10, ref chosen -12 (+2); policy rejected -15, ref rejected -14 (-1): h = 2 - (-1) = 3
PC, PR, RC, RR = t(-10.0), t(-15.0), t(-12.0), t(-14.0)


def test_dpo_sigmoid_by_hand():
    pc = PC.clone().requires_grad_(True)
    loss, m = dpo_loss(pc, PR, RC, RR, beta=0.1)
    # -log σ(0.1·3) = log(1 + e^-0.3) = 0.55436
    assert loss.item() == pytest.approx(softplus(-0.3))
    loss.sum().backward()
    # ∂/∂log π(y_w) = -β σ(-βh) = -0.1 · σ(-0.3) = -0.04256
    assert pc.grad.item() == pytest.approx(-0.1 / (1 + math.exp(0.3)))
    # implicit rewards β(log π - log π_ref): chosen 0.2, rejected -0.1
    assert m["reward_chosen"].item() == pytest.approx(0.2)
    assert m["reward_rejected"].item() == pytest.approx(-0.1)
    assert m["reward_margin"].item() == pytest.approx(0.3)
    assert m["reward_accuracy"].item() == 1.0


def test_conservative_dpo_by_hand():
    # ε = 0.1: 0.9·log(1+e^-0.3) + 0.1·log(1+e^0.3) = 0.9·0.55436 + 0.1·0.85436 = 0.58436
    loss, _ = dpo_loss(PC, PR, RC, RR, beta=0.1, variant="conservative", label_smoothing=0.1)
    assert loss.item() == pytest.approx(0.9 * softplus(-0.3) + 0.1 * softplus(0.3))


def test_ipo_by_hand():
    # (h - 1/(2β))² = (3 - 5)² = 4
    loss, _ = dpo_loss(PC, PR, RC, RR, beta=0.1, variant="ipo")
    assert loss.item() == pytest.approx(4.0)


def test_policy_equal_to_reference_is_log_2():
    for variant, eps in (("sigmoid", 0.0), ("conservative", 0.2)):
        loss, m = dpo_loss(PC, PR, PC, PR, variant=variant, label_smoothing=eps)
        assert loss.item() == pytest.approx(math.log(2))
        assert m["reward_margin"].item() == 0.0 and m["reward_accuracy"].item() == 0.5   # ties: chance


def test_dpo_argument_errors():
    with pytest.raises(ValueError, match="sigmoid, ipo, conservative"):
        dpo_loss(PC, PR, RC, RR, variant="hinge")
    with pytest.raises(ValueError, match="variant='conservative'"):
        dpo_loss(PC, PR, RC, RR, label_smoothing=0.1)
    with pytest.raises(ValueError, match="same shape"):
        dpo_loss(t(1.0, 2.0), PR, RC, RR)


def test_simpo_by_hand():
    # β = 2, γ = 1: chosen -6 over 3 tokens -> 2·(-2) = -4; rejected -12 over 4 -> 2·(-3) = -6
    # -log σ(-4 - (-6) - 1) = log(1 + e^-1) = 0.31326
    loss, m = simpo_loss(t(-6.0), t(-12.0), t(3), t(4), beta=2.0, gamma=1.0)
    assert loss.item() == pytest.approx(softplus(-1.0))
    assert m["reward_chosen"].item() == pytest.approx(-4.0)
    assert m["reward_margin"].item() == pytest.approx(2.0)


def test_bradley_terry_by_hand():
    # r_w - r_l = 1.5: log(1 + e^-1.5) = 0.20141; with margin 1: log(1 + e^-0.5) = 0.47408
    loss, m = bradley_terry_loss(t(2.0, 0.0), t(0.5, 1.0))
    torch.testing.assert_close(loss, t(softplus(-1.5), softplus(1.0)))
    assert m["reward_accuracy"].item() == 0.5  # the second pair is ranked the wrong way
    loss, _ = bradley_terry_loss(t(2.0), t(0.5), margin=1.0)
    assert loss.item() == pytest.approx(softplus(-0.5))
    loss, _ = bradley_terry_loss(t(2.0, 2.0), t(0.5, 0.5), margin=t(0.0, 1.0))
    torch.testing.assert_close(loss, t(softplus(-1.5), softplus(-0.5)))
    with pytest.raises(ValueError, match="margin"):
        bradley_terry_loss(t(2.0, 2.0), t(0.5, 0.5), margin=t(0.0, 1.0, 2.0))

"""KL estimators and controllers, entropy from logits."""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    entropy_from_logits,
    kl_penalty,
    kl_shaped_rewards,
    make_kl_controller,
)

D = torch.float64
ln = math.log


def test_estimators_by_hand():
    # π = 0.5, 0.25 ; π_ref = 0.25, 0.5 -> log r = ln 2, -ln 2 ; ρ = π_ref/π = 0.5, 2
    logp = torch.tensor([[ln(0.5), ln(0.25)]], dtype=D)
    ref = torch.tensor([[ln(0.25), ln(0.5)]], dtype=D)
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), torch.tensor([[ln(2), -ln(2)]], dtype=D))
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), torch.tensor([[0.5 * ln(2) ** 2] * 2], dtype=D))
    # k3 = ρ - 1 - ln ρ: 0.5 - 1 + ln 2 = 0.19315 ; 2 - 1 - ln 2 = 0.30685
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"),
                               torch.tensor([[0.5 - 1 + ln(2), 2 - 1 - ln(2)]], dtype=D))


def test_k1_and_k3_are_unbiased():
    # Weighted by π over every token, E_π[k1] = E_π[k3] = KL(π ‖ π_ref).
    # π = (0.5, 0.25, 0.25), π_ref = (0.25, 0.5, 0.25): KL = 0.5 ln 2 + 0.25 ln 0.5 = 0.25 ln 2
    pi = torch.tensor([0.5, 0.25, 0.25], dtype=D)
    ref = torch.tensor([0.25, 0.5, 0.25], dtype=D)
    for est in ("k1", "k3"):
        expectation = (pi * kl_penalty(pi.log(), ref.log(), est)).sum()
        assert expectation.item() == pytest.approx(0.25 * ln(2)), est
    # k2 is biased: E[½ (log r)²] = ½ (0.5 + 0.25) ln² 2 ≠ 0.25 ln 2
    assert (pi * kl_penalty(pi.log(), ref.log(), "k2")).sum().item() == pytest.approx(0.375 * ln(2) ** 2)


def test_k2_loss_gradient_is_the_reverse_kl_gradient():
    # Σ_a π(a) ∇[½ log² r(a)] with π held fixed as the sampling weights = ∇ KL(π ‖ π_ref)
    # for a softmax policy (the score-function identity, on-policy).
    logits = torch.tensor([0.3, -0.2, 0.5], dtype=D, requires_grad=True)
    ref = torch.log_softmax(torch.tensor([0.0, 0.4, -0.1], dtype=D), -1)
    logp = torch.log_softmax(logits, -1)
    (logp.exp().detach() * kl_penalty(logp, ref, "k2")).sum().backward()
    estimator_grad = logits.grad.clone()
    logits.grad = None
    logp = torch.log_softmax(logits, -1)
    (logp.exp() * (logp - ref)).sum().backward()
    torch.testing.assert_close(estimator_grad, logits.grad)


def test_mask_zeroes_and_ignores_garbage():
    logp = torch.tensor([[-1.0, math.nan, -0.5]], dtype=D, requires_grad=True)
    ref = torch.tensor([[-1.5, -math.inf, -0.5]], dtype=D)
    mask = torch.tensor([[1, 0, 1]], dtype=D)
    for est in ("k1", "k2", "k3"):
        out = kl_penalty(logp, ref, est, mask=mask)
        out.sum().backward()
        assert torch.isfinite(out).all() and out[0, 1] == 0 and out[0, 2] == 0, est
        assert logp.grad[0, 1] == 0, est
        logp.grad = None


def test_a_token_both_policies_call_impossible_is_no_divergence():
    """-inf - -inf is nan; the two agree there: 0, with a 0 gradient (masked or not), as
    summable_log_ratio has it. A nan here failed the whole step as non-finite."""
    ref = torch.tensor([[-math.inf, -2.0]], dtype=D)
    for mask in (None, torch.ones(1, 2, dtype=D)):
        for est, expected in (("k1", 1.0), ("k2", 0.5), ("k3", math.exp(-1) - 1 + 1)):
            logp = torch.tensor([[-math.inf, -1.0]], dtype=D, requires_grad=True)
            out = kl_penalty(logp, ref, est, mask=mask)
            out.sum().backward()
            assert out[0, 0] == 0 and logp.grad[0, 0] == 0, est
            assert float(out[0, 1]) == pytest.approx(expected), est
    # one side only: still a divergence (k3 clamps it, k1 keeps the infinity)
    assert kl_penalty(torch.tensor([[-1.0]], dtype=D), torch.tensor([[-math.inf]], dtype=D), "k1")[0, 0] == math.inf


def test_unknown_estimator_lists_valid():
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


def test_kl_shaped_rewards():
    # k1 = logp - ref = 0.1, -0.2, 0.3 ; β = 0.5 -> r - β k1 = 0 - 0.05, 0 + 0.1, 1 - 0.15
    logp = torch.tensor([[-1.0, -1.2, -0.7, 0.0]], dtype=D, requires_grad=True)
    ref = torch.tensor([[-1.1, -1.0, -1.0, 5.0]], dtype=D)
    rewards = torch.tensor([[0.0, 0.0, 1.0, 7.0]], dtype=D)
    mask = torch.tensor([[1, 1, 1, 0]], dtype=D)
    shaped = kl_shaped_rewards(rewards, logp, ref, mask, kl_coef=0.5, estimator="k1")
    torch.testing.assert_close(shaped, torch.tensor([[-0.05, 0.1, 0.85, 0.0]], dtype=D))
    assert not shaped.requires_grad  # the penalty is a reward, not differentiated


def test_adaptive_controller_by_hand():
    c = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    # KL 9: error 9/6 - 1 = 0.5 -> clipped 0.2; β ·= 1 + 0.2·2000/10000 = 1.04 -> 0.104
    assert c.update(9.0, 2000) == pytest.approx(0.104)
    # KL 3: error -0.5 -> -0.2; β ·= 1 - 0.2·5000/10000 = 0.9 -> 0.0936
    assert c.update(3.0, 5000) == pytest.approx(0.0936)
    # KL 6.6: error 0.1; β ·= 1 + 0.1 = 1.1 -> 0.10296
    assert c.update(6.6, 10000) == pytest.approx(0.10296)
    assert c.update(math.nan, 10000) == pytest.approx(0.10296)  # a nan measurement is ignored
    d = AdaptiveKLController(1.0, 1.0, 1)
    d.load_state_dict(c.state_dict())
    assert (d.value, d.target, d.horizon) == (c.value, 6.0, 10000)


def test_fixed_controller_and_factory():
    f = FixedKLController(0.05)
    assert f.update(100.0, 10**6) == 0.05 and f.value == 0.05
    assert isinstance(make_kl_controller(0.05), FixedKLController)
    a = make_kl_controller(0.05, kl_target=3.0, kl_horizon=500)
    assert isinstance(a, AdaptiveKLController) and a.horizon == 500
    with pytest.raises(ValueError, match="target > 0"):
        AdaptiveKLController(0.1, target=0.0, horizon=10)


def test_entropy_by_hand():
    # uniform over 2 -> ln 2 ; uniform over 4 -> ln 4 ; p = (1/4, 3/4) -> -(¼ ln ¼ + ¾ ln ¾) = 0.56233
    assert entropy_from_logits(torch.zeros(2, dtype=D)).item() == pytest.approx(ln(2))
    assert entropy_from_logits(torch.zeros(4, dtype=D)).item() == pytest.approx(ln(4))
    h = entropy_from_logits(torch.tensor([0.0, ln(3)], dtype=D)).item()
    assert h == pytest.approx(-(0.25 * ln(0.25) + 0.75 * ln(0.75)))


def test_entropy_is_stable():
    # huge logits: still ln 2 ; a -inf logit (banned token) is a zero-probability term, not nan
    assert entropy_from_logits(torch.tensor([1000.0, 1000.0])).item() == pytest.approx(ln(2))
    logits = torch.tensor([0.0, 0.0, -math.inf], requires_grad=True)
    h = entropy_from_logits(logits)
    h.backward()
    assert h.item() == pytest.approx(ln(2)) and torch.isfinite(logits.grad).all()
    # half precision in, float32 out
    assert entropy_from_logits(torch.zeros(3, 5, dtype=torch.bfloat16)).dtype == torch.float32


def test_entropy_chunks_match():
    logits = torch.randn(3, 7, 11, generator=torch.Generator().manual_seed(0))
    whole = entropy_from_logits(logits)
    assert whole.shape == (3, 7)
    torch.testing.assert_close(entropy_from_logits(logits, chunk_size=4), whole)
    torch.testing.assert_close(torch.cat([entropy_from_logits(c) for c in logits.split(2, dim=1)], 1), whole)

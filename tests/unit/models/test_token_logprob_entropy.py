"""TokenLogprobEntropy: log p(y) and H(p) from logits, with its own backward pass."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.models.logprobs import TokenLogprobEntropy


def approx(x: float):
    return pytest.approx(x, rel=1e-9, abs=1e-12)


def test_hand_derived_two_tokens():
    # z = [0, ln 3]: p = [1/4, 3/4]; y = 1
    z = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64, requires_grad=True)
    logp, entropy = TokenLogprobEntropy.apply(z, torch.tensor([1]), True)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))  # 0.562335
    assert logp.item() == approx(math.log(0.75)) and entropy.item() == approx(h)
    # d log p(y) / dz = onehot(y) - p
    (g,) = torch.autograd.grad(logp.sum(), z, retain_graph=True)
    assert g.tolist() == [[approx(-0.25), approx(0.25)]]
    # d H / dz_k = -p_k (log p_k + H): [0.205990, -0.205990]
    (g,) = torch.autograd.grad(entropy.sum(), z)
    want = [-0.25 * (math.log(0.25) + h), -0.75 * (math.log(0.75) + h)]
    assert g.tolist() == [[approx(want[0]), approx(want[1])]]
    assert abs(want[0] - 0.205990) < 1e-6


def reference(z, y):
    lsm = torch.log_softmax(z, -1)
    return lsm.gather(-1, y[:, None]).squeeze(-1), -(lsm.exp() * lsm).sum(-1)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 5), v=st.integers(2, 40), scale=st.floats(0.1, 30.0), seed=st.integers(0, 2**31 - 1),
       use=st.sampled_from(["logp", "entropy", "both"]))
def test_property_matches_log_softmax_and_autograd(n, v, scale, seed, use):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(n, v, generator=g, dtype=torch.float64) * scale).requires_grad_()
    y = torch.randint(0, v, (n,), generator=g)
    w1, w2 = torch.randn(n, generator=g, dtype=torch.float64), torch.randn(n, generator=g, dtype=torch.float64)

    def loss(lp, ent):
        return {"logp": (lp * w1).sum(), "entropy": (ent * w2).sum(), "both": (lp * w1 + ent * w2).sum()}[use]

    lp, ent = TokenLogprobEntropy.apply(z, y, True)
    want_lp, want_ent = reference(z, y)
    torch.testing.assert_close(lp, want_lp, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ent, want_ent, rtol=1e-9, atol=1e-9)
    (got,) = torch.autograd.grad(loss(lp, ent), z)
    (want,) = torch.autograd.grad(loss(*reference(z, y)), z)
    torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-9)


def test_underflowing_probabilities_stay_finite():
    z = torch.tensor([[0.0, -1000.0, 5.0]], requires_grad=True)
    lp, ent = TokenLogprobEntropy.apply(z, torch.tensor([1]), True)
    assert lp.item() == pytest.approx(-1005.0 - math.log1p(math.exp(-5.0)), rel=1e-6)  # float32
    (lp + ent).sum().backward()
    assert torch.isfinite(z.grad).all() and z.grad[0, 1] == 1.0  # onehot - p, p = 0 there


def test_without_entropy_returns_none_and_plain_gradient():
    z = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 5, 2])
    lp, ent = TokenLogprobEntropy.apply(z, y, False)
    assert ent is None
    assert torch.autograd.gradcheck(lambda x: TokenLogprobEntropy.apply(x, y, False)[0], (z,))
    assert torch.autograd.gradcheck(lambda x: TokenLogprobEntropy.apply(x, y, True), (z,))

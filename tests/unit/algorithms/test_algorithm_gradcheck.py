"""torch.autograd.gradcheck (float64, finite differences) on every loss.

Inputs are kept away from the kinks of the clipped losses (a finite difference across a kink
is not a derivative), and each test also asserts that some token sits in a clipped region, so
the flat parts are checked too.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck

from rlxf.algorithms import (
    OffPolicyParams,
    PolicyLossParams,
    bradley_terry_loss,
    dpo_loss,
    entropy_from_logits,
    kl_penalty,
    masked_mean,
    names,
    registry,
    simpo_loss,
    value_loss,
)

D = torch.float64
G = torch.Generator().manual_seed(1234)
MASK = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 0, 1, 1, 1]], dtype=D)
OLD = -torch.rand(3, 5, generator=G, dtype=D) - 0.3
ADV = torch.randn(3, 5, generator=G, dtype=D)
ROLLOUT = OLD + 0.2 * torch.randn(3, 5, generator=G, dtype=D)
# log-ratios spread over [-0.6, 0.6], away from the kinks at log(0.8), log(1.2), log(3)
LOG_R = torch.tensor([[0.5, -0.4, 0.05, -0.1, 0.3], [0.35, -0.6, 0.0, 0.2, 0.1],
                      [0.1, 0.4, -0.3, 0.45, -0.05]], dtype=D)
KINKS = (0.8, 1.2, 3.0)


def _far_from_kinks(ratio: torch.Tensor) -> None:
    for k in KINKS:
        assert ((ratio - k).abs() > 1e-3).all()


@pytest.mark.parametrize("name", ["ppo_clip", "dual_clip", "vanilla"])
@pytest.mark.parametrize("agg_name", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum",
                                      "seq_mean_token_sum_norm"])
def test_clipped_losses(name, agg_name):
    fn, agg = registry.get("policy_loss", name), registry.get("loss_agg", agg_name)
    params = PolicyLossParams(clip_eps_low=0.2, clip_eps_high=0.2, dual_clip_c=1.3)
    weight, tis_m = registry.get("off_policy", "tis")(OLD, ROLLOUT, MASK, OffPolicyParams(cap=1.1))
    _far_from_kinks(LOG_R.exp())
    # dual clip (c = 1.3) is active where Â < 0 and r > 1.3; keep away from that kink as well
    assert ((LOG_R.exp() - 1.3).abs() > 1e-3).all()

    def f(logp):
        token_loss, _ = fn(logp, OLD, ADV, MASK, params, rollout_logprobs=ROLLOUT)
        return agg(token_loss * weight, MASK, norm=5)

    assert gradcheck(f, (OLD + LOG_R).requires_grad_(True))
    _, m = fn(OLD + LOG_R, OLD, ADV, MASK, params, rollout_logprobs=ROLLOUT)
    if name != "vanilla":  # the flat (clipped) regions are part of what was checked
        assert m["clipfrac_low"] > 0 and m["clipfrac_high"] > 0 and tis_m["truncated_frac"] > 0
    if name == "dual_clip":
        assert m["clipfrac_dual"] > 0


def test_gspo_matches_its_sequence_objective():
    # GSPO-token's gradient equals the derivative of its value under seq_mean_token_mean
    # when the advantage is constant over each sequence (GSPO's setting).
    adv = ADV[:, :1].expand(3, 5)
    seq_log_r = masked_mean(LOG_R, MASK, dim=-1)
    _far_from_kinks(seq_log_r.exp())
    agg = registry.get("loss_agg", "seq_mean_token_mean")

    def f(logp):
        token_loss, _ = registry.get("policy_loss", "gspo")(logp, OLD, adv, MASK, PolicyLossParams())
        return agg(token_loss, MASK)

    assert gradcheck(f, (OLD + LOG_R).requires_grad_(True))


def test_cispo_below_the_cap():
    # Below the cap the stop-gradient weight equals r, so the value's derivative is the gradient;
    # above it they differ on purpose (covered by the hand-derived test).
    params = PolicyLossParams(cispo_eps_high=1.0)  # cap 2 > every ratio here
    assert (LOG_R.exp() < 2).all()

    def f(logp):
        token_loss, _ = registry.get("policy_loss", "cispo")(logp, OLD, ADV, MASK, params)
        return registry.get("loss_agg", "token_mean")(token_loss, MASK)

    assert gradcheck(f, (OLD + LOG_R).requires_grad_(True))


@pytest.mark.parametrize("name", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum",
                                  "seq_mean_token_sum_norm"])
def test_aggregations(name):
    agg = registry.get("loss_agg", name)
    assert gradcheck(lambda x: agg(x, MASK, norm=5), ADV.clone().requires_grad_(True))
    assert name in names("loss_agg")


@pytest.mark.parametrize("clip", [None, 0.2])
def test_value_loss(clip):
    old = torch.randn(3, 5, generator=G, dtype=D)
    returns = torch.randn(3, 5, generator=G, dtype=D)
    # values: some inside the clip range around old, some outside, none at its edge
    delta = torch.tensor([[0.1, -0.5, 0.05, 0.4, 0.0], [-0.1, 0.3, 0.15, -0.35, 0.6],
                          [0.7, -0.05, -0.25, 0.12, 0.33]], dtype=D)
    values = (old + delta).requires_grad_(True)
    assert gradcheck(lambda v: value_loss(v, old, returns, MASK, clip)[0].sum(), (values,))


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_penalty(estimator):
    logp = (OLD + LOG_R).requires_grad_(True)
    assert gradcheck(lambda x: kl_penalty(x, OLD, estimator, mask=MASK).sum(), (logp,))


def test_entropy():
    logits = torch.randn(2, 3, 7, generator=G, dtype=D, requires_grad=True)
    assert gradcheck(lambda z: entropy_from_logits(z).sum(), (logits,))
    assert gradcheck(lambda z: entropy_from_logits(z, chunk_size=2).sum(), (logits,))


@pytest.mark.parametrize("variant,eps", [("sigmoid", 0.0), ("conservative", 0.1), ("ipo", 0.0)])
def test_dpo(variant, eps):
    pc, pr = torch.randn(4, generator=G, dtype=D) - 5, torch.randn(4, generator=G, dtype=D) - 5
    rc, rr = pc + 0.3 * torch.randn(4, generator=G, dtype=D), pr + 0.3 * torch.randn(4, generator=G, dtype=D)

    def f(chosen, rejected):
        return dpo_loss(chosen, rejected, rc, rr, beta=0.5, variant=variant, label_smoothing=eps)[0].sum()

    assert gradcheck(f, (pc.requires_grad_(True), pr.requires_grad_(True)))


def test_simpo_and_bradley_terry():
    pc, pr = torch.randn(4, generator=G, dtype=D) - 5, torch.randn(4, generator=G, dtype=D) - 5
    lc, lr = torch.tensor([3, 5, 1, 8]), torch.tensor([4, 2, 6, 1])
    assert gradcheck(lambda c, r: simpo_loss(c, r, lc, lr)[0].sum(),
                     (pc.clone().requires_grad_(True), pr.clone().requires_grad_(True)))
    margin = torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=D)
    assert gradcheck(lambda c, r: bradley_terry_loss(c, r, margin=margin)[0].sum(),
                     (pc.clone().requires_grad_(True), pr.clone().requires_grad_(True)))

"""Policy losses against hand-derived values, gradients and metrics."""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.algorithms import (
    PolicyLossParams,
    cispo,
    dual_clip,
    gspo,
    names,
    ppo_clip,
    registry,
    seq_mean_token_mean,
    vanilla,
)

D = torch.float64
ln = math.log


def run(fn, ratios, advantages, mask=None, params=PolicyLossParams(), masked_logprob=math.inf, **kw):
    """One row per call. logprobs = old + log r (so r is exact); masked slots get garbage."""
    n = len(ratios)
    old = torch.tensor([-1.0, -2.0, -0.5, -1.5, -3.0, -0.2][:n] + [-7.0], dtype=D)
    logp = old.clone()
    logp[:n] += torch.tensor([ln(r) for r in ratios], dtype=D)
    logp[n] = masked_logprob  # the masked slot: inf / nan must not leak
    adv = torch.tensor(list(advantages) + [123.0], dtype=D)
    mask = torch.tensor([1.0] * n + [0.0], dtype=D) if mask is None else mask
    logp = logp[None].requires_grad_(True)
    loss, metrics = fn(logp, old[None], adv[None], mask[None], params, **kw)
    loss.sum().backward()
    return loss[0].detach(), logp.grad[0], metrics


def test_ppo_clip_by_hand():
    # ε_low = 0.2, ε_high = 0.28: r is clipped to [0.8, 1.28]
    # tok 0: r 1.5, Â  1: max(-1.5, -1.28) = -1.28   (upper clip active: no gradient)
    # tok 1: r 0.5, Â -1: max( 0.5,  0.8 ) =  0.8    (lower clip active: no gradient)
    # tok 2: r 1.1, Â  2: max(-2.2, -2.2 ) = -2.2    (inside: d/dlogπ (-Â r) = -2.2)
    # tok 3: r 0.7, Â  1: max(-0.7, -0.8 ) = -0.7    (Â>0 and r below the range: unclipped, grad -0.7)
    params = PolicyLossParams(clip_eps_low=0.2, clip_eps_high=0.28)
    loss, grad, m = run(ppo_clip, [1.5, 0.5, 1.1, 0.7], [1, -1, 2, 1], params=params)
    torch.testing.assert_close(loss, torch.tensor([-1.28, 0.8, -2.2, -0.7, 0.0], dtype=D))
    torch.testing.assert_close(grad, torch.tensor([0.0, 0.0, -2.2, -0.7, 0.0], dtype=D))
    assert m["clipfrac_high"].item() == pytest.approx(1 / 4)
    assert m["clipfrac_low"].item() == pytest.approx(1 / 4)
    # ratio stats over the 4 valid tokens: mean (1.5+0.5+1.1+0.7)/4 = 0.95
    assert m["ratio_mean"].item() == pytest.approx(0.95)
    assert m["ratio_max"].item() == pytest.approx(1.5) and m["ratio_min"].item() == pytest.approx(0.5)
    # approx KL, k3 on r: mean of (r - 1 - ln r)
    k3 = [r - 1 - ln(r) for r in (1.5, 0.5, 1.1, 0.7)]  # 0.0945, 0.1931, 0.0047, 0.0567
    assert m["approx_kl"].item() == pytest.approx(sum(k3) / 4)
    assert all(v.dim() == 0 and not v.requires_grad for v in m.values())


def test_dual_clip_by_hand():
    # c = 3, ε = 0.2 / 0.28
    # tok 0: r 5,   Â -1: ppo = max(5, 1.28) = 5, cap 3·1 = 3  -> 3   (dual clip, no grad)
    # tok 1: r 2,   Â -2: ppo = max(4, 2.56) = 4, cap 3·2 = 6  -> 4   (grad -Â r = 4)
    # tok 2: r 0.5, Â -1: ppo = max(0.5, 0.8) = 0.8, cap 3   -> 0.8 (lower clip, no grad)
    # tok 3: r 5,   Â  1: ppo = max(-5, -1.28) = -1.28       -> -1.28 (Â > 0: no dual clip)
    params = PolicyLossParams(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip_c=3.0)
    loss, grad, m = run(dual_clip, [5, 2, 0.5, 5], [-1, -2, -1, 1], params=params)
    torch.testing.assert_close(loss, torch.tensor([3.0, 4.0, 0.8, -1.28, 0.0], dtype=D))
    torch.testing.assert_close(grad, torch.tensor([0.0, 4.0, 0.0, 0.0, 0.0], dtype=D))
    assert m["clipfrac_dual"].item() == pytest.approx(1 / 4)
    assert m["clipfrac_low"].item() == pytest.approx(1 / 4)
    assert m["clipfrac_high"].item() == pytest.approx(1 / 4)


def test_gspo_by_hand():
    # row 0: log r = 0.3, -0.1, 0.1 -> mean 0.1, s = e^0.1 = 1.10517, Â = 1, inside [0.8, 1.2]
    #        loss -1.10517 on each token; d/dlogπ_t (-Â sg(s) π/sg(π)) = -s
    # row 1: log r = 0.6, 0.4 (+ a masked slot) -> mean 0.5, s = e^0.5 = 1.64872 > 1.2, Â = 1
    #        loss -1.2 on each token, no gradient
    # row 2: log r = -0.5, -0.5, -0.2 -> mean -0.4, s = e^-0.4 = 0.67032 < 0.8, Â = -1
    #        loss max(0.67032, 0.8) = 0.8, no gradient
    old = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -5.0], [-0.5, -0.7, -0.9]], dtype=D)
    log_r = torch.tensor([[0.3, -0.1, 0.1], [0.6, 0.4, math.nan], [-0.5, -0.5, -0.2]], dtype=D)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=D)
    adv = torch.tensor([[1.0] * 3, [1.0, 1.0, 0.0], [-1.0] * 3], dtype=D)
    logp = (old + log_r).requires_grad_(True)
    params = PolicyLossParams(clip_eps_low=0.2, clip_eps_high=0.2)
    loss, m = gspo(logp, old, adv, mask, params)
    loss.sum().backward()
    s0, s1, s2 = math.exp(0.1), math.exp(0.5), math.exp(-0.4)
    torch.testing.assert_close(loss.detach(), torch.tensor([[-s0] * 3, [-1.2, -1.2, 0], [0.8] * 3], dtype=D))
    torch.testing.assert_close(logp.grad, torch.tensor([[-s0] * 3, [0.0] * 3, [0.0] * 3], dtype=D))
    # 8 valid tokens: 2 clipped high (row 1), 3 clipped low (row 2); ratio = the sequence ratio
    assert m["clipfrac_high"].item() == pytest.approx(2 / 8)
    assert m["clipfrac_low"].item() == pytest.approx(3 / 8)
    assert m["ratio_mean"].item() == pytest.approx((3 * s0 + 2 * s1 + 3 * s2) / 8)


def test_gspo_gradient_is_the_sequence_objective_gradient():
    # With seq_mean_token_mean and no clipping, ∇ of the GSPO-token loss equals
    # ∇ of the paper's objective -1/N Σ_i Â_i s_i(θ), s_i = exp(mean_t log r_it).
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=g, dtype=D) - 0.5
    logp0 = old + 0.01 * torch.randn(3, 5, generator=g, dtype=D)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 1, 1, 0]], dtype=D)
    adv = torch.tensor([[0.7], [-1.3], [0.4]], dtype=D).expand(3, 5)
    logp = logp0.clone().requires_grad_(True)
    token_loss, _ = gspo(logp, old, adv, mask, PolicyLossParams(clip_eps_low=0.5, clip_eps_high=0.5))
    seq_mean_token_mean(token_loss, mask).backward()
    ref = logp0.clone().requires_grad_(True)
    n = mask.sum(-1)
    s = torch.exp(((ref - old) * mask).sum(-1) / n)
    (-(adv[:, 0] * s).mean()).backward()
    torch.testing.assert_close(logp.grad, ref.grad * mask)


def test_gspo_averages_raw_log_ratios_and_clamps_only_the_sequence():
    # Issue 17.13. 10-token responses, Â = 1, ε = 0.2, max_log_ratio = 20.
    # row 0: one token at log r = -30, nine at 0 -> mean -3, s = e^-3 = 0.049787 (clamping the
    #        token to -20 first would give e^-2). s < 0.8 with Â > 0: the unclipped branch
    #        -Â s wins, loss -e^-3 on each token, gradient -s on each token.
    # row 1: log r = -30 and +25, eight at 0 -> mean -0.5, s = e^-0.5 = 0.60653 (per-token
    #        clamping gives (-20 + 20)/10 = 0, s = 1). Loss and gradient -e^-0.5.
    # row 2: all ten at -30 -> mean -30, clamped at the sequence level to -20: s = e^-20,
    #        and the clamp makes it flat (no gradient).
    old = torch.full((3, 10), -1.0, dtype=D)
    log_r = torch.zeros(3, 10, dtype=D)
    log_r[0, 4] = -30.0
    log_r[1, 2], log_r[1, 7] = -30.0, 25.0
    log_r[2] = -30.0
    mask = torch.ones(3, 10, dtype=D)
    adv = torch.ones(3, 10, dtype=D)
    logp = (old + log_r).requires_grad_(True)
    loss, m = gspo(logp, old, adv, mask, PolicyLossParams(clip_eps_low=0.2, clip_eps_high=0.2))
    loss.sum().backward()
    s0, s1, s2 = math.exp(-3.0), math.exp(-0.5), math.exp(-20.0)
    torch.testing.assert_close(loss.detach(), torch.tensor([[-s0] * 10, [-s1] * 10, [-s2] * 10], dtype=D))
    torch.testing.assert_close(logp.grad, torch.tensor([[-s0] * 10, [-s1] * 10, [0.0] * 10], dtype=D))
    assert m["ratio_min"].item() == pytest.approx(s2)


def test_gspo_infinite_log_prob_reaches_the_sequence_clamp_without_nan():
    # A -inf log-prob (truncated sampler) in a valid slot: the mean log-ratio is -inf, so
    # s_i sits at the clamp e^-20 instead of becoming nan.
    old = torch.tensor([[-1.0, -1.0, -1.0]], dtype=D)
    logp = torch.tensor([[-1.0, -math.inf, -1.0]], dtype=D)
    loss, _ = gspo(logp, old, torch.ones(1, 3, dtype=D), torch.ones(1, 3, dtype=D), PolicyLossParams())
    torch.testing.assert_close(loss, torch.full((1, 3), -math.exp(-20.0), dtype=D))


def test_cispo_by_hand():
    # cap = 1 + 0.5 = 1.5: w = sg(min(r, 1.5)) = 1.5, 0.5, 1.2
    # loss = -Â w = -1.5, 0.5, -2.4; the gradient is -Â w ∇logπ on every token (none is dropped)
    params = PolicyLossParams(cispo_eps_high=0.5)
    loss, grad, m = run(cispo, [2.0, 0.5, 1.2], [1, -1, 2], params=params)
    torch.testing.assert_close(loss, torch.tensor([-1.5, 0.5, -2.4, 0.0], dtype=D))
    torch.testing.assert_close(grad, torch.tensor([-1.5, 0.5, -2.4, 0.0], dtype=D))
    assert m["clipfrac_high"].item() == pytest.approx(1 / 3)
    assert m["clipfrac_low"].item() == 0.0


def test_vanilla_by_hand():
    # loss = -Â r = -2, 0.5; grad = -Â r = -2, 0.5 (no clipping anywhere)
    loss, grad, m = run(vanilla, [2.0, 0.5], [1, -1])
    torch.testing.assert_close(loss, torch.tensor([-2.0, 0.5, 0.0], dtype=D))
    torch.testing.assert_close(grad, torch.tensor([-2.0, 0.5, 0.0], dtype=D))
    assert m["clipfrac_low"].item() == 0.0 and m["clipfrac_high"].item() == 0.0


def test_huge_log_ratio_is_clamped_not_inf():
    # log r = 1000 would overflow exp; clamped to 20 the loss is finite, and so is the gradient
    for name in names("policy_loss"):
        old = torch.tensor([[-1000.0, -0.5]], dtype=D)
        logp = torch.tensor([[0.0, 500.0]], dtype=D, requires_grad=True)
        loss, m = registry.get("policy_loss", name)(
            logp, old, torch.tensor([[1.0, -1.0]], dtype=D), torch.ones(1, 2, dtype=D), PolicyLossParams())
        loss.sum().backward()
        assert torch.isfinite(loss).all() and torch.isfinite(logp.grad).all(), name
        assert all(torch.isfinite(v) for v in m.values()), name


def test_all_masked_batch_gives_zeros_and_finite_metrics():
    x = torch.full((2, 3), math.nan, dtype=D)
    mask = torch.zeros(2, 3, dtype=D)
    for name in names("policy_loss"):
        logp = x.clone().requires_grad_(True)
        loss, m = registry.get("policy_loss", name)(logp, x, x, mask, PolicyLossParams(), rollout_logprobs=x)
        loss.sum().backward()
        assert torch.equal(loss.detach(), torch.zeros(2, 3, dtype=D)), name
        assert torch.equal(logp.grad, torch.zeros(2, 3, dtype=D)), name
        assert all(torch.isfinite(v) for v in m.values()), (name, m)
        assert m["ratio_max"].item() == 1.0 and m["ratio_min"].item() == 1.0


def test_every_loss_reports_the_common_metrics():
    x = torch.zeros(2, 3)
    for name in names("policy_loss"):
        _, m = registry.get("policy_loss", name)(x, x, x, torch.ones(2, 3), PolicyLossParams())
        assert {"clipfrac_low", "clipfrac_high", "approx_kl", "ratio_mean", "ratio_max", "ratio_min"} <= set(m)


def test_shape_mismatch_is_reported():
    with pytest.raises(ValueError, match=r"advantages \(2, 2\)"):
        ppo_clip(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3), PolicyLossParams())

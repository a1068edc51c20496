"""Off-policy corrections: hand-derived weights, their place in the objective, and their bounds."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.algorithms import OffPolicyParams, PolicyLossParams, kl_penalty, loss_totals, names, registry
from rlxf.algorithms.off_policy import decoupled, mis, none, tis
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.trainer.objective import PolicyObjective, Totals

D = torch.float64
ln = math.log

# one row, log ρ = log π_old - log π_rollout = ln 3, ln 0.6, 0, ln 0.4, and a masked token holding nan
OLD = torch.tensor([[-1.0, -2.0, -0.5, -1.5, 0.0]], dtype=D)
ROLLOUT = OLD - torch.tensor([[ln(3), ln(0.6), 0.0, ln(0.4), math.nan]], dtype=D)
MASK = torch.tensor([[1, 1, 1, 1, 0]], dtype=D)


def _close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=D))


def test_tis_truncates_at_the_cap():
    # ρ = 3, 0.6, 1, 0.4 -> min(ρ, 2) = 2, 0.6, 1, 0.4; one of four truncated
    w, m = tis(OLD, ROLLOUT, MASK, OffPolicyParams(cap=2.0))
    _close(w, [[2.0, 0.6, 1.0, 0.4, 0.0]])
    assert m["truncated_frac"].item() == pytest.approx(1 / 4)
    assert m["weight_mean"].item() == pytest.approx(4.0 / 4)
    assert m["weight_max"].item() == pytest.approx(2.0)
    assert m["ratio_max"].item() == pytest.approx(3.0) and m["ratio_min"].item() == pytest.approx(0.4)
    assert not w.requires_grad


def test_mis_zeroes_tokens_outside_the_bounds():
    # bounds [1/2, 2] (floor defaults to 1/cap): ρ = 3 and 0.4 are dropped, 0.6 and 1 stay
    w, m = mis(OLD, ROLLOUT, MASK, OffPolicyParams(cap=2.0))
    _close(w, [[0.0, 0.6, 1.0, 0.0, 0.0]])
    assert m["masked_frac"].item() == pytest.approx(2 / 4)
    # an explicit floor below 0.4 keeps that token with its full ratio
    w, _ = mis(OLD, ROLLOUT, MASK, OffPolicyParams(cap=2.0, floor=0.3))
    _close(w, [[0.0, 0.6, 1.0, 0.4, 0.0]])


def test_decoupled_keeps_the_whole_ratio_and_drops_tokens_above_an_optional_cap():
    w, m = decoupled(OLD, ROLLOUT, MASK, OffPolicyParams())
    _close(w, [[3.0, 0.6, 1.0, 0.4, 0.0]])
    assert m["masked_frac"].item() == 0.0
    w, m = decoupled(OLD, ROLLOUT, MASK, OffPolicyParams(cap=2.0))  # AReaL's behav_imp_weight_cap: dropped, not cut
    _close(w, [[0.0, 0.6, 1.0, 0.4, 0.0]])
    assert m["masked_frac"].item() == pytest.approx(1 / 4)


def test_none_is_one_everywhere_and_reads_no_rollout_logprobs():
    w, m = none(OLD, None, MASK, OffPolicyParams())
    assert torch.equal(w, torch.ones(1, 5, dtype=D)) and m == {}


def test_sequence_and_geometric_levels_weigh_whole_rows():
    # row 0: log ρ = ln 2, ln 1.5 (a third, masked token holds inf): Π ρ = 3, geometric mean √3
    # row 1: log ρ = ln 0.9, ln 1.0, ln 1.0: Π ρ = 0.9 = geometric mean cubed
    old = torch.zeros(2, 3, dtype=D)
    rollout = -torch.tensor([[ln(2), ln(1.5), -math.inf], [ln(0.9), 0.0, 0.0]], dtype=D)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=D)
    w, m = tis(old, rollout, mask, OffPolicyParams(cap=2.0, level="sequence"))
    _close(w, [[2.0, 2.0, 0.0], [0.9, 0.9, 0.9]])
    assert m["truncated_frac"].item() == pytest.approx(2 / 5)  # tokens: both of row 0
    w, _ = tis(old, rollout, mask, OffPolicyParams(cap=2.0, level="geometric"))
    g = 0.9 ** (1 / 3)
    _close(w, [[3 ** 0.5, 3 ** 0.5, 0.0], [g, g, g]])
    w, m = mis(old, rollout, mask, OffPolicyParams(cap=2.0, level="sequence"))
    _close(w, [[0.0, 0.0, 0.0], [0.9, 0.9, 0.9]])  # row 0 (Π ρ = 3 > 2) dropped whole
    assert m["masked_frac"].item() == pytest.approx(2 / 5)


def test_misuse_is_an_error_that_says_what_to_pass():
    with pytest.raises(ValueError, match="rollout_logprobs is None"):
        tis(OLD, None, MASK, OffPolicyParams(cap=2.0))
    with pytest.raises(ValueError, match="needs params.cap"):
        mis(OLD, ROLLOUT, MASK, OffPolicyParams())
    with pytest.raises(ValueError, match="level must be one of token, sequence, geometric"):
        tis(OLD, ROLLOUT, MASK, OffPolicyParams(cap=2.0, level="turn"))


def _objective(correction: str, policy_loss: str = "ppo_clip", loss_agg: str = "token_mean",
               **algo) -> PolicyObjective:
    cfg = AlgorithmConfig(policy_loss=policy_loss, loss_agg=loss_agg, off_policy=correction, **algo)
    return PolicyObjective.from_config(cfg, max_new_tokens=4)


def test_objective_weighs_each_token_of_the_policy_loss():
    # π_θ = π_old (r = 1): ppo_clip gives -Â; TIS weights 2, 0.6, 1 (ρ = 3, 0.6, 1, cap 2)
    # token_mean: loss = -(1·2 + 1·0.6 - 1·1) / 3 = -1.6 / 3; ∂/∂logp = -Â w / 3
    old = OLD[:, :3].float()
    rollout = ROLLOUT[:, :3].float()
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    logp = old.clone().requires_grad_(True)
    loss, m = _objective("tis")(logp, None, old, adv, mask, Totals(*loss_totals(mask)), rollout_logprobs=rollout)
    loss.backward()
    assert loss.item() == pytest.approx(-1.6 / 3)
    torch.testing.assert_close(logp.grad, torch.tensor([[-2 / 3, -0.6 / 3, 1 / 3]]))
    assert m["off_policy/weight_mean"].item() == pytest.approx(3.6 / 3)
    assert m["off_policy/truncated_frac"].item() == pytest.approx(1 / 3)
    assert m["off_policy/weight_max"].item() == pytest.approx(2.0)


def test_decoupled_clips_against_the_proximal_policy_not_the_behaviour_policy():
    # π_θ/π_prox = 1.5: above 1 + ε = 1.2 with Â = 1, so clipped (no gradient), value -1.2 w.
    # The engine sampled at π_behav = 1.4 π_prox: w = 1/1.4, and π_θ/π_behav = 1.07 would sit
    # inside the clip. Clipping is against π_prox: loss -1.2/1.4, gradient 0.
    old = torch.tensor([[-1.0]])
    logp = (old + ln(1.5)).requires_grad_(True)
    rollout = old + ln(1.4)
    mask = torch.ones(1, 1)
    loss, _ = _objective("decoupled")(logp, None, old, torch.ones(1, 1), mask, Totals(*loss_totals(mask)),
                                      rollout_logprobs=rollout)
    loss.backward()
    assert loss.item() == pytest.approx(-1.2 / 1.4)
    assert logp.grad.item() == 0.0


def _previous_objective(policy_loss, agg, logprobs, entropy, old, adv, mask, totals, rollout, ref, kl_coef,
                        entropy_coef, norm):
    """The objective as it was before corrections existed: policy loss, aggregation, KL, entropy."""
    kw = dict(num_tokens=totals.num_tokens, num_seqs=totals.num_seqs, norm=norm)
    token_loss, _ = policy_loss(logprobs, old, adv, mask, PolicyLossParams(), rollout)
    loss = agg(token_loss, mask, **kw)
    loss = loss + kl_coef * agg(kl_penalty(logprobs, ref, "k3", mask=mask), mask, **kw)
    loss = loss - entropy_coef * agg(entropy, mask, **kw)
    return loss * totals.batch_fraction


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_none_is_the_previous_objective_bit_for_bit(b, t, seed):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(b, t, generator=g) < 0.8).float()
    old = -3 * torch.rand(b, t, generator=g)
    rollout = old + 0.3 * torch.randn(b, t, generator=g)
    ref = old + 0.2 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, t, generator=g)
    logp0 = old + 0.5 * torch.randn(b, t, generator=g)
    entropy = torch.rand(b, t, generator=g)
    totals = Totals(*loss_totals(mask), batch_fraction=0.75)
    for policy_loss in names("policy_loss"):
        for agg in names("loss_agg"):
            objective = _objective("none", policy_loss, agg, kl_coef=0.1, entropy_coef=0.01)
            new_logp, old_logp = logp0.clone().requires_grad_(True), logp0.clone().requires_grad_(True)
            loss, _ = objective(new_logp, entropy, old, adv, mask, totals, rollout_logprobs=rollout, ref_logprobs=ref,
                                kl_coef=0.1)
            expected = _previous_objective(registry.get("policy_loss", policy_loss), registry.get("loss_agg", agg),
                                           old_logp, entropy, old, adv, mask, totals, rollout, ref, 0.1, 0.01, 4.0)
            loss.backward()
            expected.backward()
            assert torch.equal(loss, expected), (policy_loss, agg)
            assert torch.equal(new_logp.grad, old_logp.grad), (policy_loss, agg)


LOGPROBS = st.floats(-40.0, 0.0, allow_nan=False)


def _batch(data, b, t):
    old = torch.tensor(data.draw(st.lists(LOGPROBS, min_size=b * t, max_size=b * t))).reshape(b, t)
    rollout = torch.tensor(data.draw(st.lists(LOGPROBS, min_size=b * t, max_size=b * t))).reshape(b, t)
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=b * t, max_size=b * t))).reshape(b, t)
    return old, rollout, mask


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(1, 4), st.integers(1, 6), st.floats(1.0, 10.0),
       st.sampled_from(["token", "sequence", "geometric"]))
def test_tis_weight_is_in_zero_to_cap(data, b, t, cap, level):
    old, rollout, mask = _batch(data, b, t)
    w, m = tis(old, rollout, mask, OffPolicyParams(cap=cap, level=level))
    assert ((w >= 0) & (w <= cap)).all()
    assert (w[~mask] == 0).all()
    assert 0.0 <= m["truncated_frac"].item() <= 1.0


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(1, 4), st.integers(1, 6), st.floats(1.0, 10.0), st.floats(0.05, 1.0))
def test_mis_only_removes_tokens_whose_ratio_is_outside_the_bounds(data, b, t, cap, floor):
    old, rollout, mask = _batch(data, b, t)
    w, m = mis(old, rollout, mask, OffPolicyParams(cap=cap, floor=floor))
    ratio = torch.exp((old - rollout).clamp(-20, 20))       # ρ per token, computed here
    outside = (ratio < floor) | (ratio > cap)
    assert (w[mask & outside] == 0).all()
    torch.testing.assert_close(w[mask & ~outside], ratio[mask & ~outside])  # the rest keep their weight
    assert (w[~mask] == 0).all()
    if mask.any():
        assert m["masked_frac"].item() == pytest.approx((mask & outside).sum().item() / mask.sum().item())


@settings(max_examples=30, deadline=None)
@given(st.data(), st.integers(1, 4), st.integers(1, 6), st.sampled_from(["sequence", "geometric"]))
def test_mis_at_sequence_level_keeps_or_drops_whole_sequences(data, b, t, level):
    old, rollout, mask = _batch(data, b, t)
    w, _ = mis(old, rollout, mask, OffPolicyParams(cap=2.0, level=level))
    for row in range(b):
        kept = w[row][mask[row]] > 0
        assert kept.all() or not kept.any()


def test_the_docs_example_correction_registers_and_weighs_by_hand():
    import inspect
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "algorithms.md").read_text()
    code = re.search(r"```python\n(from rlxf.algorithms import importance_ratio.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12  # "a correction in ten lines"
    exec(compile(code, "algorithms.md", "exec"), {})
    fn = registry.get("off_policy", "drop_overconfident")
    # ρ = 3, 0.6, 1, 0.4 (and a masked token): the floor 0.5 drops only ρ = 0.4
    w, m = fn(OLD, ROLLOUT, MASK, OffPolicyParams(floor=0.5))
    _close(w, [[1.0, 1.0, 1.0, 0.0, 0.0]])
    assert m["masked_frac"].item() == pytest.approx(1 / 4)
    cfg = AlgorithmConfig(off_policy="drop_overconfident", is_floor=0.5)
    assert inspect.unwrap(PolicyObjective.from_config(cfg, max_new_tokens=4).correction) is fn


def test_config_fills_each_correction_default_and_refuses_contradictions():
    assert AlgorithmConfig(off_policy="tis").is_cap == 2.0       # verl's rollout_is_threshold
    assert AlgorithmConfig(off_policy="mis").is_cap == 2.0
    assert AlgorithmConfig(off_policy="decoupled").is_cap is None  # AReaL: uncapped
    assert AlgorithmConfig(off_policy="tis", is_cap=5.0).is_cap == 5.0
    assert AlgorithmConfig(tis_cap=None).off_policy == "none"      # an earlier run's config.yaml still loads
    with pytest.raises(ValueError, match="algorithm.tis_cap is now algorithm.off_policy: tis"):
        AlgorithmConfig(tis_cap=2.0)
    with pytest.raises(ValueError, match="algorithm.off_policy is none"):
        AlgorithmConfig(is_cap=2.0)
    with pytest.raises(ValueError, match="must not exceed"):
        AlgorithmConfig(off_policy="mis", is_floor=3.0)

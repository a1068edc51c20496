"""Advantage estimators against numbers derived by hand (arithmetic in the comments)."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from rlxf.algorithms import (
    AdvantageParams,
    MovingBaseline,
    discounted_returns,
    dynamic_sampling_keep,
    gae,
    group_mean_std,
    grpo,
    maxrl,
    reinforce,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
)

D = torch.float64
X = 99.0  # garbage on masked positions: must never show up in any result

# Five samples, T = 3. Outcome rewards sit on the last valid token; masked slots hold garbage.
# group 7 = rows 0, 1, 2 (scores 1, 0, 5); group 3 = rows 3, 4 (scores 2, 4). Ids need not be 0..G-1.
REWARDS = torch.tensor([
    [0.0, 0.0, 1.0],   # mask 1 1 1   score 1
    [0.0, 0.0, X],     # mask 1 1 0   score 0
    [5.0, X, -X],      # mask 1 0 0   score 5
    [0.0, 0.0, 2.0],   # mask 1 1 1   score 2
    [0.0, 4.0, X],     # mask 1 1 0   score 4
], dtype=D)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=D)
GROUPS = torch.tensor([7, 7, 7, 3, 3])


def on_tokens(per_sample: list[float]) -> torch.Tensor:
    """Each sample's number on its valid tokens, 0 on masked ones."""
    return torch.tensor(per_sample, dtype=D)[:, None] * MASK


def test_grpo_group_normalised():
    # group 7: mean (1+0+5)/3 = 2, deviations -1, -2, 3, unbiased var (1+4+9)/2 = 7, std √7
    # group 3: mean 3, deviations -1, 1, var (1+1)/1 = 2, std √2
    s7, s3 = math.sqrt(7), math.sqrt(2)
    expected = on_tokens([-1 / s7, -2 / s7, 3 / s7, -1 / s3, 1 / s3])
    adv, _ = grpo(REWARDS, MASK, GROUPS, None, AdvantageParams(eps=0.0))
    torch.testing.assert_close(adv, expected)


def test_grpo_eps_is_added_to_std():
    # group 3 deviation 1 over (√2 + 0.5)
    adv, _ = grpo(REWARDS, MASK, GROUPS, None, AdvantageParams(eps=0.5))
    assert adv[4, 0].item() == pytest.approx(1 / (math.sqrt(2) + 0.5))


def test_dr_grpo_skips_std():
    # norm_by_std off: just the deviation from the group mean
    adv, _ = grpo(REWARDS, MASK, GROUPS, None, AdvantageParams(norm_by_std=False))
    torch.testing.assert_close(adv, on_tokens([-1, -2, 3, -1, 1]))


def test_returns_are_discounted_reward_to_go():
    # γ = 0.5: row 0 [0.25, 0.5, 1]; row 1 zeros; row 2 [5]; row 3 [0.5, 1, 2]; row 4 [0 + 0.5·4, 4]
    expected = torch.tensor([[0.25, 0.5, 1.0], [0, 0, 0], [5, 0, 0], [0.5, 1, 2], [2, 4, 0]], dtype=D)
    for fn in (grpo, rloo, reinforce_pp, reinforce_pp_baseline, reinforce):
        _, returns = fn(REWARDS, MASK, GROUPS, None, AdvantageParams(gamma=0.5))
        torch.testing.assert_close(returns, expected, msg=fn.__name__)
    torch.testing.assert_close(discounted_returns(REWARDS, MASK, 0.5), expected)


def test_maxrl_divides_by_the_group_mean():
    # group 7: mean 2, (1-2)/2 = -1/2, (0-2)/2 = -1, (5-2)/2 = 3/2; group 3: mean 3, -1/3, 1/3
    adv, returns = maxrl(REWARDS, MASK, GROUPS, None, AdvantageParams())
    torch.testing.assert_close(adv, on_tokens([-0.5, -1.0, 1.5, -1 / 3, 1 / 3]))
    torch.testing.assert_close(returns, discounted_returns(REWARDS, MASK, 1.0))


def test_maxrl_on_pass_fail_groups():
    # 8 samples: 1 right -> p = 1/8, right (1 - 1/8) / (1/8) = 7, wrong -1;
    # 7 right -> p = 7/8, right (1/8) / (7/8) = 1/7, wrong -1; all wrong and all right -> 0
    scores = [1, 0, 0, 0, 0, 0, 0, 0] + [1, 1, 1, 1, 1, 1, 1, 0] + [0] * 8 + [1] * 8
    mask = torch.ones(32, 1, dtype=D)
    adv, _ = maxrl(torch.tensor(scores, dtype=D)[:, None], mask, torch.arange(32) // 8, None, AdvantageParams())
    expected = [7] + [-1] * 7 + [1 / 7] * 7 + [-1] + [0] * 16
    torch.testing.assert_close(adv[:, 0], torch.tensor(expected, dtype=D))


def test_maxrl_gradient_is_the_right_samples_likelihood_gradient():
    # a categorical policy over 4 answers, 6 samples of one prompt, answers 0 and 2 right:
    # (1/N) Σ_i Â_i ∇log π(a_i) = (1/K) Σ_{i right} ∇log π(a_i) - (1/N) Σ_i ∇log π(a_i)
    logits = torch.tensor([0.3, -1.0, 0.5, 2.0], dtype=D, requires_grad=True)
    answers = torch.tensor([0, 3, 2, 3, 1, 0])
    right = (answers == 0) | (answers == 2)
    adv, _ = maxrl(right.to(D)[:, None], torch.ones(6, 1, dtype=D), torch.zeros(6, dtype=torch.long), None,
                   AdvantageParams())
    logp = torch.log_softmax(logits, -1)[answers]
    (grad,) = torch.autograd.grad((adv[:, 0] * logp).mean(), logits, retain_graph=True)
    (expected,) = torch.autograd.grad(logp[right].mean() - logp.mean(), logits)
    torch.testing.assert_close(grad, expected)


def test_maxrl_refuses_negative_returns():
    with pytest.raises(ValueError, match=r"maxrl: a sample's return is -1.*must be >= 0.*choose grpo"):
        maxrl(torch.tensor([[1.0], [-1.0]], dtype=D), torch.ones(2, 1, dtype=D), torch.tensor([0, 0]), None,
              AdvantageParams())


def test_rloo_leave_one_out():
    # group 7: 1 - (0+5)/2 = -1.5;  0 - (1+5)/2 = -3;  5 - (1+0)/2 = 4.5
    # group 3: 2 - 4 = -2;  4 - 2 = 2
    adv, _ = rloo(REWARDS, MASK, GROUPS, None, AdvantageParams())
    torch.testing.assert_close(adv, on_tokens([-1.5, -3, 4.5, -2, 2]))


def test_reinforce_pp_global_normalisation():
    # G (γ = 0.5) on the 11 valid tokens: 0.25 0.5 1 | 0 0 | 5 | 0.5 1 2 | 2 4
    # Σ = 1.75 + 0 + 5 + 3.5 + 6 = 16.25, mean = 16.25/11
    # Σ G² = 0.0625+0.25+1 + 25 + 0.25+1+4 + 4+16 = 51.5625, unbiased var = (51.5625 - 16.25²/11)/10
    mean = 16.25 / 11
    std = math.sqrt((51.5625 - 16.25**2 / 11) / 10)
    returns = torch.tensor([[0.25, 0.5, 1.0], [0, 0, 0], [5, 0, 0], [0.5, 1, 2], [2, 4, 0]], dtype=D)
    adv, _ = reinforce_pp(REWARDS, MASK, GROUPS, None, AdvantageParams(gamma=0.5, eps=0.0))
    torch.testing.assert_close(adv, (returns - mean) / std * MASK)


def test_reinforce_pp_baseline():
    # a = S - group mean = -1, -2, 3, -1, 1 on 3, 2, 1, 3, 2 tokens (11 in all)
    # Σ a = -3 - 4 + 3 - 3 + 2 = -5, mean = -5/11; Σ a² = 3 + 8 + 9 + 3 + 2 = 25
    # unbiased var = (25 - 11·(5/11)²)/10 = (25 - 25/11)/10 = 25/11, std = 5/√11
    # Â = (a + 5/11) · √11/5:  -6/(5√11), -17/(5√11), 38/(5√11), -6/(5√11), 16/(5√11)
    k = 5 * math.sqrt(11)
    adv, _ = reinforce_pp_baseline(REWARDS, MASK, GROUPS, None, AdvantageParams(eps=0.0))
    torch.testing.assert_close(adv, on_tokens([-6 / k, -17 / k, 38 / k, -6 / k, 16 / k]))


def test_reinforce_moving_baseline():
    # γ = 1: G = [1 1 1], [0 0], [5], [2 2 2], [4 4]; minus b = 1.5
    expected = torch.tensor([[-0.5] * 3, [-1.5, -1.5, 0], [3.5, 0, 0], [0.5] * 3, [2.5, 2.5, 0]], dtype=D)
    adv, _ = reinforce(REWARDS, MASK, GROUPS, None, AdvantageParams(baseline=1.5))
    torch.testing.assert_close(adv, expected)


# GAE: γ = 0.9, λ = 0.8, γλ = 0.72. Row 1 is multi-turn: token 1 is an environment token.
GAE_REWARDS = torch.tensor([[0.0, 0.0, 1.0], [0.5, X, 1.0]], dtype=D)
GAE_VALUES = torch.tensor([[0.5, 0.6, 0.7], [0.2, X, 0.4]], dtype=D)
GAE_MASK = torch.tensor([[1, 1, 1], [1, 0, 1]], dtype=D)
# row 0, backwards:  t=2  δ = 1 - 0.7 = 0.3                  Â = 0.3
#                    t=1  δ = 0.9·0.7 - 0.6 = 0.03           Â = 0.03 + 0.72·0.3 = 0.246
#                    t=0  δ = 0.9·0.6 - 0.5 = 0.04           Â = 0.04 + 0.72·0.246 = 0.21712
# row 1 skips the environment token (the next step of t=0 is t=2):
#                    t=2  δ = 1 - 0.4 = 0.6                  Â = 0.6
#                    t=0  δ = 0.5 + 0.9·0.4 - 0.2 = 0.66     Â = 0.66 + 0.72·0.6 = 1.092
GAE_ADV = [[0.21712, 0.246, 0.3], [1.092, 0.0, 0.6]]
# returns = Â + V: [0.71712, 0.846, 1.0], [1.292, 0, 1.0]
GAE_RETURNS = [[0.71712, 0.846, 1.0], [1.292, 0.0, 1.0]]


def test_gae_by_hand():
    params = AdvantageParams(gamma=0.9, gae_lambda=0.8, norm_by_std=False)
    adv, returns = gae(GAE_REWARDS, GAE_MASK, torch.tensor([0, 1]), GAE_VALUES, params)
    torch.testing.assert_close(adv, torch.tensor(GAE_ADV, dtype=D))
    torch.testing.assert_close(returns, torch.tensor(GAE_RETURNS, dtype=D))


def test_gae_whitening_keeps_returns():
    params = AdvantageParams(gamma=0.9, gae_lambda=0.8, norm_by_std=True, eps=0.0)
    adv, returns = gae(GAE_REWARDS, GAE_MASK, torch.tensor([0, 1]), GAE_VALUES, params)
    valid = [0.21712, 0.246, 0.3, 1.092, 0.6]
    mean, std = statistics.mean(valid), statistics.stdev(valid)
    expected = [[(v - mean) / std for v in GAE_ADV[0]], [(GAE_ADV[1][0] - mean) / std, 0.0, (0.6 - mean) / std]]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=D))
    torch.testing.assert_close(returns, torch.tensor(GAE_RETURNS, dtype=D))


def test_gae_needs_values():
    with pytest.raises(ValueError, match="gae needs values"):
        gae(GAE_REWARDS, GAE_MASK, torch.tensor([0, 1]), None, AdvantageParams())


def test_groups_of_one_and_empty_rows_give_zero_not_nan():
    rewards = torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.0, 0.0]], dtype=D)
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]], dtype=D)
    singletons = torch.tensor([0, 1, 2])
    for fn in (grpo, rloo, maxrl):
        adv, returns = fn(rewards, mask, singletons, None, AdvantageParams())
        assert torch.equal(adv, torch.zeros_like(adv)), fn.__name__
        assert torch.isfinite(returns).all()
    for fn in (reinforce_pp, reinforce_pp_baseline, reinforce):
        adv, returns = fn(rewards, mask, singletons, None, AdvantageParams())
        assert torch.isfinite(adv).all() and adv[2].abs().sum() == 0, fn.__name__
    # everything masked: all zeros
    for fn in (grpo, maxrl, rloo, reinforce_pp, reinforce_pp_baseline, reinforce):
        adv, returns = fn(rewards, torch.zeros_like(mask), torch.tensor([0, 0, 0]), None, AdvantageParams())
        assert torch.equal(adv, torch.zeros_like(adv)) and torch.equal(returns, torch.zeros_like(returns))
    adv, returns = gae(rewards, torch.zeros_like(mask), singletons, rewards, AdvantageParams())
    assert torch.equal(adv, torch.zeros_like(adv)) and torch.equal(returns, torch.zeros_like(returns))


def test_shape_errors_name_the_inputs():
    with pytest.raises(ValueError, match="group_ids"):
        grpo(REWARDS, MASK, torch.tensor([0, 1]), None, AdvantageParams())
    with pytest.raises(ValueError, match=r"rewards \(5, 3\) and mask \(5, 2\)"):
        rloo(REWARDS, MASK[:, :2], GROUPS, None, AdvantageParams())


def test_group_mean_std_direct():
    # group 0: 1, 3 -> mean 2, std √2; group 5: 4 alone -> std 0, size 1
    mean, std, size = group_mean_std(torch.tensor([1.0, 4.0, 3.0]), torch.tensor([0, 5, 0]))
    torch.testing.assert_close(mean, torch.tensor([2.0, 4.0, 2.0]))
    torch.testing.assert_close(std, torch.tensor([math.sqrt(2), 0.0, math.sqrt(2)]))
    torch.testing.assert_close(size, torch.tensor([2.0, 1.0, 2.0]))


def test_dynamic_sampling_keeps_groups_with_signal():
    # group 0 all 1 (drop), group 1 {0, 1} (keep), group 2 all 0.5 (drop), group 3 alone (drop)
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 3.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    keep = dynamic_sampling_keep(scores, groups)
    assert keep.tolist() == [False, False, True, True, False, False, False]


def test_moving_baseline():
    mb = MovingBaseline(decay=0.9)
    assert mb.value == 0.0
    assert mb.update(2.0) == 2.0                               # first update: b = 2
    assert mb.update(4.0) == pytest.approx(0.9 * 2 + 0.1 * 4)  # 2.2
    other = MovingBaseline()
    other.load_state_dict(mb.state_dict())
    assert other.update(1.0) == pytest.approx(0.9 * 2.2 + 0.1 * 1.0)  # 2.08: the state carried over
    with pytest.raises(ValueError, match="decay"):
        MovingBaseline(decay=1.0)

"""Edges of the advantage estimators a researcher's own inputs reach: integer (pass/fail)
rewards, and a nan return under maxrl. Expected values derived by hand in each test."""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.algorithms import (
    AdvantageParams,
    discounted_returns,
    group_mean_std,
    masked_var,
    masked_whiten,
    registry,
    zero_variance_fraction,
)

# two groups of two one-token samples: group 0 scores 1 and 0, group 1 scores 0 and 3
INT_REWARDS = torch.tensor([[1], [0], [0], [3]])
GROUPS = torch.tensor([0, 0, 1, 1])
MASK = torch.ones(4, 1)


@pytest.mark.parametrize("name, expected", [
    # group means 0.5 and 1.5, unbiased stds √0.5 and √4.5: ±0.5/√0.5 = ±√0.5, ±1.5/√4.5 = ±√0.5
    ("grpo", [math.sqrt(0.5), -math.sqrt(0.5), -math.sqrt(0.5), math.sqrt(0.5)]),
    # n/(n-1) (S - mean) with n = 2: ±1 and ±3
    ("rloo", [1.0, -1.0, -3.0, 3.0]),
    # (S - mean) / mean: (1 - 0.5)/0.5 = 1, -1, (0 - 1.5)/1.5 = -1, (3 - 1.5)/1.5 = 1
    ("maxrl", [1.0, -1.0, -1.0, 1.0]),
    # batch mean 1, unbiased std √((0 + 1 + 1 + 4)/3) = √2: (S - 1)/√2
    ("reinforce_pp", [0.0, -1 / math.sqrt(2), -1 / math.sqrt(2), 2 / math.sqrt(2)]),
    # a = 0.5, -0.5, -1.5, 1.5 (mean 0), unbiased std √((0.25 + 0.25 + 2.25 + 2.25)/3) = √(5/3)
    ("reinforce_pp_baseline", [0.5 / math.sqrt(5 / 3), -0.5 / math.sqrt(5 / 3), -1.5 / math.sqrt(5 / 3),
                               1.5 / math.sqrt(5 / 3)]),
])
def test_integer_rewards_give_the_float_rewards_advantages(name, expected):
    """A pass/fail reward written as an int tensor kept its dtype through the group statistics:
    GRPO's mean 0.5 became 0, its std 0, and a right answer's advantage 1/eps = 1e6."""
    adv, returns = registry.get("advantage", name)(INT_REWARDS, MASK, GROUPS, None, AdvantageParams(eps=0.0))
    assert adv.dtype == torch.float32 and returns.dtype == torch.float32
    torch.testing.assert_close(adv[:, 0], torch.tensor(expected), atol=1e-6, rtol=0)


def test_integer_rewards_are_discounted_in_floats():
    """G_t = r_t + γ G_{t+1} with γ = 0.5 over rewards [0, 0, 1]: 0.25, 0.5, 1 (not truncated to 0)."""
    _, returns = registry.get("advantage", "reinforce")(torch.tensor([[0, 0, 1]]), torch.ones(1, 3),
                                                        torch.tensor([0]), None, AdvantageParams(gamma=0.5))
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.5, 1.0]]))


def test_masked_statistics_of_integers_are_floats():
    x = torch.tensor([0, 1])
    mean, std, size = group_mean_std(x, torch.tensor([0, 0]))
    torch.testing.assert_close(mean, torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(std, torch.full((2,), math.sqrt(0.5)))
    torch.testing.assert_close(masked_var(x, torch.ones(2)), torch.tensor(0.5))
    # (x - 0.5) / √0.5
    torch.testing.assert_close(masked_whiten(x, torch.ones(2), eps=0.0), torch.tensor([-math.sqrt(0.5), math.sqrt(0.5)]))


def test_maxrl_keeps_a_nan_return_loud():
    """nan > 0 is False, so maxrl read a group with a nan return as a group without signal and
    gave it 0, silently, where every other estimator gives nan (and the trainer skips the step)."""
    rewards = torch.tensor([[1.0], [0.0], [math.nan], [1.0]])
    adv, _ = registry.get("advantage", "maxrl")(rewards, MASK, GROUPS, None, AdvantageParams())
    assert adv[:2, 0].tolist() == [1.0, -1.0]   # the other group: (1 - 0.5)/0.5, (0 - 0.5)/0.5
    assert adv[2:].isnan().all()


def test_maxrl_names_the_negative_return_not_a_nan_beside_it():
    rewards = torch.tensor([[1.0], [-2.0], [math.nan], [1.0]])
    with pytest.raises(ValueError, match=r"return is -2;"):
        registry.get("advantage", "maxrl")(rewards, MASK, GROUPS, None, AdvantageParams())


def test_zero_variance_fraction_of_integer_scores():
    """Group 0 scores 1 and 0, group 1 scores 1 and 1: one group of two has no spread. The
    fraction was computed in the scores' dtype, and mean() of a long tensor raised."""
    frac = zero_variance_fraction(torch.tensor([1, 0, 1, 1]), torch.tensor([0, 0, 1, 1]))
    assert frac.dtype == torch.float32 and frac.item() == 0.5


def test_discounted_returns_of_integer_rewards():
    torch.testing.assert_close(discounted_returns(torch.tensor([[2, 0, 1]]), torch.ones(1, 3), 0.5),
                               torch.tensor([[2.25, 0.5, 1.0]]))   # 2 + 0.5·(0 + 0.5·1), 0 + 0.5·1, 1

"""Advantage estimators on a tiny batch derived by hand, and whitening's numerics.

The batch: two groups of three samples with outcome rewards on the last valid token,

    group 0: S = (1, 0, 0.5)   lengths (3, 2, 4)
    group 1: S = (2, 2, -1)    lengths (1, 2, 3)

so 15 valid tokens in all.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.algorithms import (
    AdvantageParams,
    gae,
    grpo,
    masked_var,
    masked_whiten,
    maxrl,
    outcome_token_rewards,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
)
from rlxf.algorithms.value import explained_variance

LENGTHS = (3, 2, 4, 1, 2, 3)
SCORES = (1.0, 0.0, 0.5, 2.0, 2.0, -1.0)
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1])


def _batch(scores=SCORES, lengths=LENGTHS, width=4):
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).float()
    return outcome_token_rewards(torch.tensor(scores), mask), mask


def _first_tokens(adv):
    return adv[:, 0].tolist()


def test_grpo_and_dr_grpo_by_hand():
    """GRPO (Shao et al. 2024, eq. for outcome supervision; verl compute_grpo_outcome_advantage):
    Â_i = (S_i - mean_g S) / (std_g S + eps), unbiased std. Group 0: mean 0.5, std 0.5 -> (1, -1, 0).
    Group 1: mean 1, std √3 -> (1/√3, 1/√3, -2/√3). Dr.GRPO (Liu et al. 2025): S_i - mean_g S."""
    rewards, mask = _batch()
    adv, _ = grpo(rewards, mask, GROUPS, None, AdvantageParams(eps=0.0))
    r3 = math.sqrt(3)
    assert _first_tokens(adv) == pytest.approx([1, -1, 0, 1 / r3, 1 / r3, -2 / r3], abs=1e-6)
    assert torch.equal(adv, adv[:, :1] * mask)   # the sample's number on every valid token, 0 elsewhere
    adv, _ = grpo(rewards, mask, GROUPS, None, AdvantageParams(norm_by_std=False))
    assert _first_tokens(adv) == pytest.approx([0.5, -0.5, 0, 1, 1, -2], abs=1e-6)


def test_rloo_by_hand():
    """RLOO (Ahmadian et al. 2024, eq. 5; TRL's RLOO): Â_i = S_i - 1/(n-1) Σ_{j≠i} S_j.
    Group 0: 1 - 0.25, 0 - 0.75, 0.5 - 0.5; group 1: 2 - 0.5, 2 - 0.5, -1 - 2."""
    rewards, mask = _batch()
    adv, _ = rloo(rewards, mask, GROUPS, None, AdvantageParams())
    assert _first_tokens(adv) == pytest.approx([0.75, -0.75, 0, 1.5, 1.5, -3], abs=1e-6)


def test_reinforce_pp_by_hand():
    """REINFORCE++ (Hu 2025; OpenRLHF advantage_estimator=reinforce): with γ = 1 the reward-to-go of
    every valid token is its sample's S; whitened over the 15 valid tokens: mean 8/15, unbiased
    variance Σ(G - 8/15)² / 14."""
    rewards, mask = _batch()
    adv, returns = reinforce_pp(rewards, mask, GROUPS, None, AdvantageParams(eps=0.0))
    tokens = [s for s, n in zip(SCORES, LENGTHS) for _ in range(n)]
    mean = sum(tokens) / 15
    std = math.sqrt(sum((g - mean) ** 2 for g in tokens) / 14)
    assert _first_tokens(adv) == pytest.approx([(s - mean) / std for s in SCORES], abs=1e-6)
    assert _first_tokens(returns) == pytest.approx(list(SCORES))


def test_reinforce_pp_baseline_by_hand():
    """REINFORCE++-baseline (Hu 2025; OpenRLHF reinforce_baseline): a_i = S_i - mean_g S =
    (0.5, -0.5, 0, 1, 1, -2), then whitened over the valid tokens (token-weighted: mean -1/6)."""
    rewards, mask = _batch()
    adv, _ = reinforce_pp_baseline(rewards, mask, GROUPS, None, AdvantageParams(eps=0.0))
    a = (0.5, -0.5, 0.0, 1.0, 1.0, -2.0)
    tokens = [x for x, n in zip(a, LENGTHS) for _ in range(n)]
    mean = sum(tokens) / 15
    assert mean == pytest.approx(-1 / 6)
    std = math.sqrt(sum((x - mean) ** 2 for x in tokens) / 14)
    assert _first_tokens(adv) == pytest.approx([(x - mean) / std for x in a], abs=1e-6)


def test_maxrl_by_hand():
    """MaxRL (Tajwar et al. 2026): (S_i - mean_g S) / mean_g S. Group 0: mean 0.5 -> (1, -1, 0);
    group 1 with S = (2, 2, 0): mean 4/3 -> (0.5, 0.5, -1)."""
    rewards, mask = _batch(scores=(1.0, 0.0, 0.5, 2.0, 2.0, 0.0))
    adv, _ = maxrl(rewards, mask, GROUPS, None, AdvantageParams())
    assert _first_tokens(adv) == pytest.approx([1, -1, 0, 0.5, 0.5, -1], abs=1e-6)


@pytest.mark.parametrize("reward", [0.7, 123.456, 1e6 + 0.1])
def test_equal_rewards_whiten_to_zero_not_to_rounding_noise(reward):
    """Every sample earned the same reward: no signal, so every advantage must be 0. In float32
    the batch mean of 700-token rows of 123.456 is off by a rounding error, and whitening divided
    that error by a std of the same size: advantages of +0.97 on every token (SFT on the model's
    own samples) from REINFORCE++, and from GAE's whitening."""
    torch.manual_seed(0)
    lengths = torch.randint(1, 701, (64,)).tolist()
    rewards, mask = _batch(scores=[reward] * 64, lengths=lengths, width=700)
    groups = torch.arange(64) // 8
    for fn in (reinforce_pp, reinforce_pp_baseline):
        adv, _ = fn(rewards, mask, groups, None, AdvantageParams())
        assert adv.abs().max().item() == 0.0, fn.__name__
    # GAE with V = 0, γ = λ = 1: Â_t = G_t = the reward on every token, whitened to 0
    adv, _ = gae(rewards, mask, groups, torch.zeros_like(rewards), AdvantageParams(gae_lambda=1.0))
    assert adv.abs().max().item() == 0.0
    # the variance of equal values is 0, not the rounding error squared
    assert masked_var(torch.full_like(rewards, reward), mask).item() == 0.0


@pytest.mark.parametrize("scale", [1e20, 1e30])
def test_whitening_is_scale_free_for_huge_finite_rewards(scale):
    """Whitening does not depend on the rewards' scale. In float32 a squared deviation above
    ~1.8e19 overflowed: the std became inf and every REINFORCE++ advantage 0 (no learning,
    no error)."""
    rewards, mask = _batch()
    want, _ = reinforce_pp(rewards, mask, GROUPS, None, AdvantageParams())
    got, _ = reinforce_pp(rewards * scale, mask, GROUPS, None, AdvantageParams())
    assert torch.allclose(got, want, atol=1e-5)
    x = torch.tensor([[1.0, 3.0]]) * scale
    assert masked_whiten(x, torch.ones(1, 2), eps=0.0)[0].tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)])


def test_explained_variance_of_constant_returns_is_zero():
    """Var(R) = 0 gives 0 (value.explained_variance's doc). In float32 the variance of 2,400
    returns of 0.7 was a rounding error, and 1 - Var(R - V) / error came out as -2.9e12."""
    torch.manual_seed(0)
    returns = torch.full((8, 300), 0.7)
    values = 0.7 + 0.1 * torch.randn(8, 300)
    assert explained_variance(returns, values, torch.ones(8, 300)).item() == 0.0

"""GAE across an environment turn and the critic's explained variance, against numbers derived
by hand (arithmetic in the comments)."""

from __future__ import annotations

import statistics

import pytest
import torch

from rlxf.algorithms import AdvantageParams, gae, value_loss
from rlxf.algorithms.value import explained_variance

D = torch.float64
X = 99.0  # garbage on masked positions: must never show up in any result

# row 0: model token, environment token (mask 0), two model tokens; outcome reward 1 on the last
# row 1: two model tokens with per-turn rewards 0.5 and -1, then padding
REWARDS = torch.tensor([[0.0, X, 0.0, 1.0], [0.5, -1.0, X, X]], dtype=D)
VALUES = torch.tensor([[0.5, X, 0.2, 0.6], [1.0, -0.5, X, X]], dtype=D)
MASK = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]], dtype=D)


def test_gae_skips_an_environment_turn_and_discounts_per_model_token():
    # γ = 0.9, λ = 0.5, γλ = 0.45; V = 0 after the last valid token; the environment token is no step
    # row 0: t=3 δ = 1 - 0.6 = 0.4,              Â = 0.4
    #        t=2 δ = 0.9·0.6 - 0.2 = 0.34,       Â = 0.34 + 0.45·0.4 = 0.52
    #        t=0 δ = 0.9·0.2 - 0.5 = -0.32,      Â = -0.32 + 0.45·0.52 = -0.086
    # row 1: t=1 δ = -1 + 0.5 = -0.5,            Â = -0.5
    #        t=0 δ = 0.5 + 0.9·(-0.5) - 1 = -0.95, Â = -0.95 + 0.45·(-0.5) = -1.175
    params = AdvantageParams(gamma=0.9, gae_lambda=0.5, norm_by_std=False)
    adv, returns = gae(REWARDS, MASK, torch.arange(2), VALUES, params)
    torch.testing.assert_close(adv, torch.tensor([[-0.086, 0.0, 0.52, 0.4], [-1.175, -0.5, 0.0, 0.0]], dtype=D))
    # returns = Â + V, the λ-return the critic regresses on
    torch.testing.assert_close(returns, torch.tensor([[0.414, 0.0, 0.72, 1.0], [-0.175, -1.0, 0.0, 0.0]], dtype=D))
    # whitened over the batch's five valid tokens (unbiased std); the returns stay the λ-returns
    white, white_returns = gae(REWARDS, MASK, torch.arange(2), VALUES, AdvantageParams(
        gamma=0.9, gae_lambda=0.5, norm_by_std=True, eps=0.0))
    raw = [-0.086, 0.52, 0.4, -1.175, -0.5]
    mean, std = statistics.mean(raw), statistics.stdev(raw)
    torch.testing.assert_close(white[MASK.bool()], torch.tensor([(a - mean) / std for a in raw], dtype=D))
    torch.testing.assert_close(white_returns, returns)


def test_explained_variance_by_hand():
    # R = 1, 2, 3 (Var 1); V = 0.9, 2.1, 3.0: R - V = 0.1, -0.1, 0 (Var (0.01 + 0.01) / 2 = 0.01) -> 0.99
    returns = torch.tensor([[1.0, 2.0, X], [3.0, X, X]], dtype=D)
    values = torch.tensor([[0.9, 2.1, -X], [3.0, X, 0.0]], dtype=D)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=D)
    assert float(explained_variance(returns, values, mask)) == pytest.approx(0.99)
    # V constant: R - V has R's variance -> 0; V = R -> 1; constant R -> 0, not nan
    assert float(explained_variance(returns, torch.ones_like(values), mask)) == pytest.approx(0.0)
    assert float(explained_variance(returns, returns, mask)) == pytest.approx(1.0)
    assert float(explained_variance(torch.ones_like(returns), values, mask)) == 0.0
    # the value loss reports the same number
    _, metrics = value_loss(values, values, returns, mask)
    assert float(metrics["vf_explained_var"]) == pytest.approx(0.99)


def test_explained_variance_of_a_batch_is_not_the_mean_of_its_halves():
    # each row alone: V explains its within-row spread perfectly (1.0); the batch's rows differ by
    # an offset V misses, so over the batch V explains little. A metric averaged over
    # micro-batches of one row would report 1.0; the critic reports the batch's.
    returns = torch.tensor([[0.0, 1.0], [10.0, 11.0]], dtype=D)
    values = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=D)
    mask = torch.ones_like(returns)
    halves = [float(explained_variance(returns[i:i + 1], values[i:i + 1], mask[i:i + 1])) for i in range(2)]
    assert halves == [1.0, 1.0]
    # R = 0, 1, 10, 11: mean 5.5, Σ dev² = 2·30.25 + 2·20.25 = 101;
    # R - V = 0, 0, 10, 10: mean 5, Σ dev² = 4·25 = 100; both over n - 1 = 3  ->  1 - 100/101
    assert float(explained_variance(returns, values, mask)) == pytest.approx(1 - 100 / 101)

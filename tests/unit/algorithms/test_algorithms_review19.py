"""Review 19: non-finite and missing inputs to the algorithms fail loudly and say what was wrong."""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.algorithms.advantages import (
    AdvantageParams,
    MovingBaseline,
    grpo,
    maxrl,
    reinforce_pp_baseline,
    rloo,
)
from rlxf.algorithms.aggregation import seq_mean_token_sum_norm
from rlxf.algorithms.groups import dynamic_sampling_keep, group_mean_std
from rlxf.algorithms.kl import kl_penalty
from rlxf.algorithms.off_policy import importance_ratio
from rlxf.algorithms.policy_losses import PolicyLossParams, gspo
from rlxf.algorithms.preference import dpo_loss, simpo_loss
from rlxf.algorithms.shaping import outcome_token_rewards

D = torch.float64
NAN, INF = math.nan, math.inf


def test_gspo_nan_log_prob_makes_the_loss_nan_not_a_silent_ratio_of_one():
    # GSPO (Zheng et al. 2025, eq. 7): s_i = exp(mean_t log r_t). A nan log-prob (a broken forward)
    # makes s_i nan, so the step is skipped as for ppo_clip; it used to count as log r = 0.
    old = torch.zeros(1, 3, dtype=D)
    logp = torch.tensor([[0.0, NAN, 0.0]], dtype=D)
    loss, _ = gspo(logp, old, torch.ones(1, 3, dtype=D), torch.ones(1, 3, dtype=D), PolicyLossParams())
    assert torch.isnan(loss).all()
    # a token impossible under both policies (-inf - -inf) still counts as agreement: s = e^0 = 1, ℓ = -Â
    logp = torch.tensor([[-INF, -1.0]], dtype=D)
    old = torch.tensor([[-INF, -1.0]], dtype=D)
    loss, _ = gspo(logp, old, torch.ones(1, 2, dtype=D), torch.ones(1, 2, dtype=D), PolicyLossParams())
    torch.testing.assert_close(loss, torch.tensor([[-1.0, -1.0]], dtype=D))


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_importance_ratio_of_a_nan_engine_log_prob_is_nan(level):
    # ρ = π_old / π_rollout; a nan from the engine used to become ρ = 1 (full trust) silently
    old = torch.zeros(1, 3, dtype=D)
    rollout = torch.tensor([[0.0, NAN, 0.0]], dtype=D)
    rho = importance_ratio(old, rollout, torch.ones(1, 3, dtype=D), level)
    assert torch.isnan(rho[0, 1])
    if level != "token":
        assert torch.isnan(rho).all()
    else:
        torch.testing.assert_close(rho[0, [0, 2]], torch.ones(2, dtype=D))


@pytest.mark.parametrize("estimator", [grpo, rloo, maxrl, reinforce_pp_baseline])
def test_group_estimators_without_group_ids_name_the_estimator(estimator):
    rewards, mask = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match=f"{estimator.__name__} compares the samples.*group_ids is None"):
        estimator(rewards, mask, None, None, AdvantageParams())
    with pytest.raises(ValueError, match="group_ids must be a .B,. long tensor"):
        group_mean_std(torch.ones(2), None)


def test_moving_baseline_leaves_out_a_non_finite_batch_mean():
    # b ← decay·b + (1 - decay)·mean: 1, then nan and inf are left out, then 0.5·1 + 0.5·3 = 2
    mb = MovingBaseline(decay=0.5)
    assert mb.update(1.0) == 1.0
    assert mb.update(NAN) == 1.0
    assert mb.update(-INF) == 1.0
    assert mb.update(3.0) == 2.0
    assert mb.updates == 2


@pytest.mark.parametrize("beta", [0.0, -0.1, NAN, INF])
def test_preference_losses_refuse_a_beta_that_is_not_positive_and_finite(beta):
    # IPO (Azar et al. 2023, eq. 17) divides by β: β = 0 raised ZeroDivisionError; DPO and SimPO at
    # β = 0 have a constant loss (log 2) and no gradient, and β < 0 trains the rejected response up.
    z = torch.zeros(2, dtype=D)
    for variant in ("sigmoid", "ipo", "conservative"):
        with pytest.raises(ValueError, match="dpo_loss: beta must be a finite number > 0"):
            dpo_loss(z, z, z, z, beta=beta, variant=variant)
    with pytest.raises(ValueError, match="simpo_loss: beta must be a finite number > 0"):
        simpo_loss(z, z, torch.ones(2), torch.ones(2), beta=beta)


@pytest.mark.parametrize("norm", [NAN, INF])
def test_dr_grpo_norm_must_be_finite(norm):
    # Dr.GRPO (Liu et al. 2025) divides by a constant L: nan made the loss nan, inf made it 0 (no learning)
    with pytest.raises(ValueError, match="needs norm > 0 and finite"):
        seq_mean_token_sum_norm(torch.ones(1, 2), torch.ones(1, 2), norm=norm)


def test_approx_kl_metric_is_accurate_for_a_small_float32_log_ratio():
    # k3 (Schulman 2020) at log r = x: e^x - 1 - x = x²/2 + x³/6 + ... = 5.0017e-7 for x = 1e-3.
    # exp(x) - 1 in float32 gave 5.235e-7 (5% high; 3x at x = 1e-4), the size of a typical PPO drift.
    logp = torch.tensor([[1e-3]], dtype=torch.float32)
    _, m = gspo(logp, torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), PolicyLossParams())
    assert m["approx_kl"].item() == pytest.approx(0.5e-6 + 1e-9 / 6, rel=1e-3)


def test_kl_penalty_refuses_a_mask_that_would_broadcast():
    # a (B,) mask with B = T broadcast over the token dim: it masked columns, not rows
    with pytest.raises(ValueError, match=r"kl_penalty: mask \(2,\) must match logprobs \(2, 2\)"):
        kl_penalty(torch.zeros(2, 2), torch.ones(2, 2), "k1", mask=torch.tensor([1.0, 0.0]))


def test_dynamic_sampling_drops_a_group_whose_trained_sample_gets_zero_advantage():
    # float32 scores 0.1, 0.2, 0.3 with only the 0.2 trained: its GRPO/RLOO advantage is exactly 0
    # (the float32 group mean is 0.2), so the group teaches nothing; a float64 mean, 0.2 + 5e-9,
    # used to call it signal and keep it (DAPO, Yu et al. 2025, §3.2: keep groups with signal)
    scores = torch.tensor([0.1, 0.2, 0.3])
    groups = torch.zeros(3, dtype=torch.long)
    mask = torch.ones(3, 2)
    adv, _ = grpo(outcome_token_rewards(scores, mask), mask, groups, None, AdvantageParams())
    assert (adv[1] == 0).all()
    trained = torch.tensor([False, True, False])
    assert not dynamic_sampling_keep(scores, groups, None, trained).any()
    assert dynamic_sampling_keep(scores, groups, None, torch.tensor([True, True, False])).all()

"""The run diagnostics warn only where their claim holds: "equal rewards in a group, zero
advantage" is true of a group baseline (grpo, rloo), not of PPO's critic or REINFORCE++'s batch
baseline, and with rollout.n 1 every group is one sample (zero_variance_frac 1.0 every step)."""

from __future__ import annotations

import pytest

from rlxf.algorithms import registry
from rlxf.trainer.diagnostics import Diagnostics, DiagnosticThresholds

HEALTHY = {"rollout/logprob_gap_mean": 1e-6, "policy/clipfrac_low": 0.0, "policy/clipfrac_high": 0.0}


def _feed(d: Diagnostics, rows: list[dict]) -> list[str]:
    return [msg for step, m in enumerate(rows, start=1) for msg in d.observe(step, m)]


def test_no_signal_is_not_claimed_for_an_estimator_without_a_group_baseline():
    # PPO with rollout.n 1: every group is one sample, so every group "has equal rewards"
    rows = [HEALTHY | {"groups/zero_variance_frac": 1.0, "critic/loss": 0.1}] * 20
    assert _feed(Diagnostics(DiagnosticThresholds(window=4), group_baseline=False), rows) == []
    (msg,) = _feed(Diagnostics(DiagnosticThresholds(window=4)), rows)   # grpo's: 100% of groups, no signal
    assert "100% of groups had equal rewards" in msg


@pytest.mark.parametrize(("name", "group_baseline"), [("grpo", True), ("rloo", True), ("maxrl", True),
                                                      ("reinforce_pp_baseline", True), ("gae", False),
                                                      ("reinforce_pp", False), ("reinforce", False)])
def test_the_registry_says_which_estimators_compare_a_groups_samples(name, group_baseline):
    """What the loop passes as ``group_baseline``: ``registry.needs("advantage", name).groups``."""
    assert registry.needs("advantage", name).groups is group_baseline


def test_a_forgotten_source_and_the_averages_it_pulls_down_are_one_warning():
    d = Diagnostics(DiagnosticThresholds(eval_patience=2))
    evals = [{"eval/accuracy": 0.6, "eval/source_mean_accuracy": 0.6, "eval/a/accuracy": 0.8, "eval/b/accuracy": 0.4},
             {"eval/accuracy": 0.5, "eval/source_mean_accuracy": 0.5, "eval/a/accuracy": 0.6, "eval/b/accuracy": 0.4},
             {"eval/accuracy": 0.4, "eval/source_mean_accuracy": 0.4, "eval/a/accuracy": 0.4, "eval/b/accuracy": 0.4},
             {"eval/accuracy": 0.3, "eval/source_mean_accuracy": 0.3, "eval/a/accuracy": 0.2, "eval/b/accuracy": 0.4}]
    (msg,) = _feed(d, [HEALTHY | e for e in evals])    # b never fell below its first 40%: not named
    assert msg.startswith("step 3: held-out accuracy has been below its first value for 2 evaluations: "
                          "eval/a/accuracy (80.0%) is now 40.0%, eval/accuracy (60.0%) is now 40.0%, "
                          "eval/source_mean_accuracy (60.0%) is now 40.0%. RL is not improving"), msg
    assert "eval/b/accuracy" not in msg and "train.optim.lr" in msg

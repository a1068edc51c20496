"""The warnings a user needs when RL does not learn: each fires after its patience, once, on
the "rlxf" logger, and never on a healthy run."""

from __future__ import annotations

import logging

import pytest

from rlxf.trainer.diagnostics import Diagnostics, DiagnosticThresholds

HEALTHY = {"groups/zero_variance_frac": 0.3, "rollout/logprob_gap_mean": 1e-6,
           "policy/clipfrac_low": 0.01, "policy/clipfrac_high": 0.02, "response/same_frac": 0.3}


def _feed(d: Diagnostics, rows: list[dict]) -> list[tuple[int, str]]:
    return [(step, msg) for step, m in enumerate(rows, start=1) for msg in d.observe(step, m)]


def test_a_healthy_run_raises_nothing(caplog):
    d = Diagnostics()
    rows = [HEALTHY | ({"eval/accuracy": 0.2 + 0.01 * i} if i % 5 == 0 else {}) for i in range(100)]
    with caplog.at_level(logging.WARNING, logger="rlxf"):
        assert _feed(d, rows) == []
    assert not caplog.records


def test_no_signal_warns_once_after_a_full_window_of_mostly_equal_groups(caplog):
    d = Diagnostics(DiagnosticThresholds(window=4, zero_variance_frac=0.8))
    rows = [HEALTHY | {"groups/zero_variance_frac": 0.9}] * 20
    with caplog.at_level(logging.WARNING, logger="rlxf"):
        issued = _feed(d, rows)
    assert [step for step, _ in issued] == [4]                       # the first full window, then never again
    assert "90% of groups had equal rewards" in issued[0][1]
    assert [r.name for r in caplog.records] == ["rlxf"] and caplog.records[0].levelno == logging.WARNING


def test_no_signal_counts_the_groups_dynamic_sampling_dropped():
    """Dynamic sampling hands the actor only groups that disagree (zero_variance_frac 0), but it
    kept 5% of what it sampled: 95% had no signal."""
    d = Diagnostics(DiagnosticThresholds(window=3))
    issued = _feed(d, [HEALTHY | {"groups/zero_variance_frac": 0.0, "sampling/kept_frac": 0.05}] * 3)
    assert [step for step, _ in issued] == [3] and "95%" in issued[0][1]


def test_no_signal_needs_most_groups_on_average():
    d = Diagnostics(DiagnosticThresholds(window=4, zero_variance_frac=0.8))
    # mean 0.775 over every window of 4: below the threshold though half the steps are at 1.0
    rows = [HEALTHY | {"groups/zero_variance_frac": v} for v in [1.0, 0.55] * 10]
    assert _feed(d, rows) == []


@pytest.mark.parametrize(("key", "bad", "needle"), [
    ("rollout/logprob_gap_mean", 0.2, "rollout/logprob_gap_mean"),
    ("policy/clipfrac_high", 0.5, "PPO clip"),
])
def test_gap_and_clipping_warn_after_patience_consecutive_steps(key, bad, needle):
    d = Diagnostics(DiagnosticThresholds(patience=3))
    # two bad steps, a good one (the streak restarts), then bad for good
    values = [bad, bad, 0.0, bad, bad, bad, bad, bad]
    issued = _feed(d, [HEALTHY | {key: v} for v in values])
    assert [step for step, _ in issued] == [6]
    assert needle in issued[0][1]


def test_clip_fraction_adds_low_high_and_dual():
    d = Diagnostics(DiagnosticThresholds(patience=1, clip_frac=0.2))
    m = HEALTHY | {"policy/clipfrac_low": 0.08, "policy/clipfrac_high": 0.08, "policy/clipfrac_dual": 0.08}
    (msg,) = d.observe(1, m)
    assert "24% of tokens" in msg


def test_eval_below_its_start_for_several_evals_warns_once_per_source():
    d = Diagnostics(DiagnosticThresholds(eval_patience=3))
    evals = [  # start 0.5; easy: below at 2 and 3, recovers at 4, then below at 5, 6, 7 -> warns at 7
        {"eval/accuracy": 0.5, "eval/easy/accuracy": 0.9},
        {"eval/accuracy": 0.6, "eval/easy/accuracy": 0.8},
        {"eval/accuracy": 0.7, "eval/easy/accuracy": 0.7},
        {"eval/accuracy": 0.7, "eval/easy/accuracy": 0.9},
        {"eval/accuracy": 0.7, "eval/easy/accuracy": 0.5},
        {"eval/accuracy": 0.7, "eval/easy/accuracy": 0.4},
        {"eval/accuracy": 0.7, "eval/easy/accuracy": 0.3},
        {"eval/accuracy": 0.7, "eval/easy/accuracy": 0.2},
    ]
    steps_without_eval = [HEALTHY] * 4   # steps with no eval neither count nor reset
    rows = [row for e in evals for row in (HEALTHY | e, *steps_without_eval)]
    issued = _feed(d, rows)
    assert len(issued) == 1
    step, msg = issued[0]
    assert step == 6 * 5 + 1 and "eval/easy/accuracy" in msg and "90.0%" in msg and "30.0%" in msg


def test_steps_without_the_metrics_are_ignored():
    assert Diagnostics().observe(1, {"reward/mean": 0.0}) == []


@pytest.mark.parametrize(("field", "value"), [("window", 0), ("patience", 0), ("eval_patience", 0),
                                              ("zero_variance_frac", 0.0), ("zero_variance_frac", 1.5),
                                              ("same_response_frac", 0.0)])
def test_thresholds_reject_impossible_values(field, value):
    with pytest.raises(ValueError, match=f"DiagnosticThresholds.{field}"):
        DiagnosticThresholds(**{field: value})


def test_every_warning_names_the_settings_to_change():
    """A warning is only useful if it says what to do: each names at least one config field."""
    import re

    d = Diagnostics(DiagnosticThresholds(window=1, patience=1, eval_patience=1))
    bad = {"groups/zero_variance_frac": 1.0, "rollout/logprob_gap_mean": 0.5, "policy/clipfrac_low": 0.9,
           "response/same_frac": 1.0}
    issued = d.observe(1, bad | {"eval/accuracy": 0.5}) + d.observe(2, bad | {"eval/accuracy": 0.1})
    assert len(issued) == 5
    for msg in issued:
        assert re.search(r"\b(?:train|algorithm|rollout|data)\.[a-z_]+", msg), msg


def test_one_answer_to_every_question_warns_once_after_a_full_window():
    """GRPO on family_relationships from a model at the most common answer's share ended with
    "son" as 99% of its samples (docs/algorithms.md): same_frac rising towards 1."""
    d = Diagnostics(DiagnosticThresholds(window=4))
    rows = [HEALTHY | {"response/same_frac": f} for f in (0.5, 0.7, 0.7, 0.6, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0)]
    issued = _feed(d, rows)
    # windows: 0.625, 0.725, 0.8 (steps 3-6): the first at 0.75 or more; gcd's start, whose
    # samples were half "2" (the right answer to 30% of its problems), stays below
    assert [step for step, _ in issued] == [6] and "80% of the samples" in issued[0][1]


def _traj(uid: str, response: list[int], group: int = 0, correct: bool | None = None):
    from rlxf.types import Prompt, Trajectory

    return Trajectory(prompt=Prompt(uid=uid, prompt_ids=[1], prompt_text="q"), group=group, response_ids=response,
                      response_text="", rollout_logprobs=[0.0] * len(response), loss_mask=[1] * len(response),
                      policy_versions=[0] * len(response), finish_reason="stop", reward=0.0, correct=correct)


def test_same_frac_counts_one_response_over_the_steps_prompts():
    from rlxf.trainer.collect import step_metrics
    from rlxf.trainer.timer import PhaseTimer

    # 3 of 5 samples, over two prompts, are the response [7, 2]
    trajs = [_traj("a", [7, 2]), _traj("a", [7, 2]), _traj("a", [5]), _traj("b", [7, 2]), _traj("b", [7])]
    assert step_metrics(trajs, PhaseTimer())["response/same_frac"] == pytest.approx(3 / 5)
    # one prompt: its samples agreeing is a sharp policy, not one answer to every question
    assert "response/same_frac" not in step_metrics(trajs[:3], PhaseTimer())


def test_identical_frac_counts_the_groups_that_sampled_one_response():
    from rlxf.trainer.collect import identical_group_frac, step_metrics
    from rlxf.trainer.timer import PhaseTimer

    trajs = [_traj("a", [7, 2], 0), _traj("a", [7, 2], 0), _traj("a", [7, 2], 0),   # one response three times
             _traj("b", [7, 2], 1), _traj("b", [7], 1),                              # two responses
             _traj("c", [4], 2), _traj("c", [4], 2),                                 # one response twice
             _traj("d", [4], 3)]                                                     # a group of one: not counted
    assert step_metrics(trajs, PhaseTimer())["groups/identical_frac"] == pytest.approx(2 / 3)
    assert "groups/identical_frac" not in step_metrics(trajs[-1:], PhaseTimer())
    assert identical_group_frac(trajs[-1:]) is None
    # one right response sampled n times is a prompt solved, not a policy stuck: only the wrong one counts
    verdicts = [_traj("a", [7], 0, True), _traj("a", [7], 0, True),
                _traj("b", [5], 1, False), _traj("b", [5], 1, False),
                _traj("c", [5], 2, True), _traj("c", [6], 2, False)]
    assert identical_group_frac(verdicts) == pytest.approx(1 / 3)


def test_no_signal_tells_a_deterministic_policy_from_a_task_too_hard():
    """Zero-variance groups are either a task the policy never (or always) solves, whose samples
    differ, or a policy that samples one response n times: GRPO at lr auto on efficacy's
    number_sequence (benchmarks/README.md). The advice differs, so does the warning."""
    rows = [HEALTHY | {"groups/zero_variance_frac": 0.9, "groups/identical_frac": f} for f in (0.2, 0.2, 0.9, 0.9)]
    hard = _feed(Diagnostics(DiagnosticThresholds(window=2)), rows[:2])
    assert len(hard) == 1 and "too hard" in hard[0][1] and "deterministic" not in hard[0][1]
    # the window's mean identical share, 0.55, is at least half of its zero-variance share, 0.9
    sharp = _feed(Diagnostics(DiagnosticThresholds(window=2)), rows[1:3])
    assert len(sharp) == 1 and "deterministic" in sharp[0][1] and "train.optim.lr" in sharp[0][1]
    assert "55% sampled one and the same wrong response" in sharp[0][1]
    # a run that starts too hard and later collapses gets both, each once
    both = _feed(Diagnostics(DiagnosticThresholds(window=2)), rows + rows)
    assert [("deterministic" in msg) for _, msg in both] == [False, True]
    # dynamic sampling: the actor's groups all disagree; what was sampled is one response per group
    ds = [HEALTHY | {"groups/zero_variance_frac": 0.0, "groups/identical_frac": 0.0,
                     "sampling/kept_frac": 0.05, "sampling/identical_frac": 0.8}] * 2
    assert "deterministic" in _feed(Diagnostics(DiagnosticThresholds(window=2)), ds)[0][1]

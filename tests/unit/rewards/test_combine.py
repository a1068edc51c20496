"""The weighted sum, error scores, accuracy and batch metrics (hand-derived + properties)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlxf.rewards.scorer import combine
from rlxf.rewards.types import RewardResult, ScoredSample, VerifierFailure, batch_metrics

NAMES, WEIGHTS = ["math", "format", "len"], [1.0, 0.1, 0.5]


def test_weighted_sum_by_hand():
    # 1.0 * 1 + 0.1 * 1 + 0.5 * (-0.4) = 0.9
    s = combine(NAMES, WEIGHTS, [RewardResult(1.0, {"correct": 1.0}), RewardResult(1.0), RewardResult(-0.4)],
                accuracy="math", error_score=0.0, uid="u1")
    assert s.reward == pytest.approx(0.9)
    assert s.scores == {"math": 1.0, "format": 1.0, "len": -0.4}
    assert (s.correct, s.failures, s.error, s.uid) == (True, {}, None, "u1")
    assert s.metrics == {"math/correct": 1.0}


def test_failures_score_the_error_score():
    # math failed -> -1;  1.0 * (-1) + 0.1 * 0 + 0.5 * (-1 timeout) = -1.5
    s = combine(NAMES, WEIGHTS, [RewardResult(1.0, error="broken truth"), RewardResult(0.0),
                                 VerifierFailure("timeout", "too slow")], accuracy="math", error_score=-1.0)
    assert s.reward == pytest.approx(-1.5)
    assert s.scores == {"math": -1.0, "format": 0.0, "len": -1.0}
    assert s.correct is None  # the accuracy verifier failed: no verdict
    assert set(s.failures) == {"math", "len"} and s.failures["len"].kind == "timeout"
    assert s.error == "math: error: broken truth; len: timeout: too slow"


def test_non_finite_scores_are_errors():
    s = combine(["a"], [1.0], [RewardResult(float("nan"))], accuracy="a", error_score=0.0)
    assert s.reward == 0.0 and s.failures["a"].kind == "error"


def test_accuracy_from_explicit_metric_else_score_threshold():
    explicit = combine(["a"], [1.0], [RewardResult(0.5, {"correct": 1.0})], accuracy="a", error_score=0.0)
    threshold = combine(["a"], [1.0], [RewardResult(0.999)], accuracy="a", error_score=0.0)
    other = combine(["a", "b"], [1.0, 1.0], [RewardResult(0.0), RewardResult(2.0)], accuracy="b", error_score=0.0)
    assert (explicit.correct, threshold.correct, other.correct) == (True, False, True)


outcomes = st.one_of(
    st.builds(RewardResult, st.floats(-10, 10)),
    st.builds(VerifierFailure, st.sampled_from(["error", "timeout", "crash"]), st.text(max_size=5)),
)


@given(st.lists(st.tuples(st.floats(-3, 3), outcomes), min_size=1, max_size=5), st.floats(-2, 2))
def test_reward_is_the_weighted_sum_of_logged_scores(items, error_score):
    names = [f"v{i}" for i in range(len(items))]
    weights = [w for w, _ in items]
    s = combine(names, weights, [o for _, o in items], accuracy="v0", error_score=error_score)
    assert math.isclose(s.reward, sum(w * s.scores[n] for w, n in zip(weights, names, strict=True)), abs_tol=1e-9)
    for n, (_, o) in zip(names, items, strict=True):
        assert (n in s.failures) == isinstance(o, VerifierFailure)
        assert s.scores[n] == (error_score if n in s.failures else o.score)


def test_batch_metrics_by_hand():
    a = ScoredSample(1.0, {"m": 1.0, "f": 0.0}, True, metrics={"m/x": 2.0})
    b = ScoredSample(0.0, {"m": 0.0, "f": 1.0}, False, failures={"m": VerifierFailure("timeout", "t")},
                     metrics={"m/x": 4.0})
    c = ScoredSample(0.5, {"m": 0.5, "f": 1.0}, None, failures={"f": VerifierFailure("crash", "c")})
    m = batch_metrics([a, b, c])
    assert m["reward/count"] == 3
    assert m["reward/mean"] == pytest.approx(0.5)
    assert m["reward/accuracy"] == pytest.approx(0.5)    # None does not count
    assert (m["reward/errors"], m["reward/timeouts"], m["reward/crashes"]) == (2, 1, 1)
    assert m["reward/m/mean"] == pytest.approx(0.75)     # over a and c (b failed)
    assert m["reward/f/mean"] == pytest.approx(0.5)      # over a and b
    assert (m["reward/m/failures"], m["reward/f/failures"]) == (1, 1)
    assert m["reward/m/x"] == pytest.approx(3.0)
    assert batch_metrics([]) == {"reward/count": 0.0}


def test_scored_sample_json_round_trip():
    s = ScoredSample(0.25, {"a": 0.25}, None, {"a": VerifierFailure("crash", "died")}, {"a/x": 1.0}, "uid-7")
    assert ScoredSample.from_json(s.to_json()) == s


def test_reward_input_from_a_trajectory():
    from rlxf.rewards.types import RewardInput
    from rlxf.types import Prompt, Trajectory

    prompt = Prompt("arith:train:3", [1, 2], "What is 2+2?", "4", {"task": "arithmetic"})
    traj = Trajectory(prompt, 0, [5, 6, 7], "<answer>4</answer>", [0.0] * 3, [1] * 3, [0] * 3, "stop")
    x = RewardInput.from_trajectory(traj, max_new_tokens=64)
    assert x == RewardInput("What is 2+2?", "<answer>4</answer>", "4", {"task": "arithmetic"}, 3, 64, "arith:train:3")
    assert RewardInput.from_json(x.to_json()) == x
    x.metadata["changed"] = True
    assert prompt.metadata == {"task": "arithmetic"}  # a copy: verifiers cannot edit the dataset

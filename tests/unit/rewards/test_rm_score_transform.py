"""How a raw reward-model score becomes the reward: normalised, then clipped (hand-derived)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from rlxf.config.reward import RewardModelVerifierConfig
from rlxf.rewards.reward_model import ScoreStats, score_transform

STATS = ScoreStats(mean=1.5, std=2.0, count=10)


@pytest.mark.parametrize(("raw", "normalize", "clip", "want"), [
    (3.0, "none", None, 3.0),
    (-4.0, "none", (-1.0, 2.0), -1.0),
    (0.0, "sigmoid", None, 0.5),
    (math.log(3.0), "sigmoid", None, 0.75),           # σ(ln 3) = 3 / (3 + 1)
    (-800.0, "sigmoid", None, 0.0),                   # no overflow far out
    (5.5, "standard", None, 2.0),                     # (5.5 - 1.5) / 2
    (0.5, "standard", None, -0.5),                    # (0.5 - 1.5) / 2
    (5.5, "standard", (-1.0, 1.0), 1.0),              # 2.0 clipped to hi
    (-10.0, "standard", (-1.0, 1.0), -1.0),           # -5.75 clipped to lo
    (2.5, "standard", (-1.0, 1.0), 0.5),              # inside the range: unchanged
])
def test_score_transform(raw, normalize, clip, want):
    assert score_transform(raw, normalize, STATS, clip) == pytest.approx(want, abs=1e-12)


def test_standard_with_a_zero_spread_does_not_divide_by_zero():
    flat = ScoreStats(mean=1.0, std=0.0, count=4)
    assert score_transform(1.0 + 1e-6, "standard", flat) == pytest.approx(1.0)  # σ floored at 1e-6


def test_standard_needs_stats_and_unknown_modes_are_named():
    with pytest.raises(ValueError, match="statistics"):
        score_transform(1.0, "standard")
    with pytest.raises(ValueError, match="allowed: none, sigmoid, standard"):
        score_transform(1.0, "zscore", STATS)


def test_stats_round_trip_and_a_missing_file_says_what_writes_it(tmp_path):
    STATS.save(tmp_path)
    assert ScoreStats.load(tmp_path) == STATS
    with pytest.raises(FileNotFoundError, match="rlxf rm"):
        ScoreStats.load(tmp_path / "elsewhere")


def test_clip_must_be_ordered():
    assert RewardModelVerifierConfig(path="rm", clip=(-1, 1)).clip == (-1.0, 1.0)
    with pytest.raises(ValidationError, match="lo < hi"):
        RewardModelVerifierConfig(path="rm", clip=(1, -1))

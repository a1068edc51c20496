"""A custom reward function's dict return is checked like its other returns: a score that is not
a number (a string, None) or metrics that are not a dict fail that sample with a message naming
the function and the value, instead of a string being read as its number or a bare TypeError."""

from __future__ import annotations

import re

import pytest

from rlxf.rewards.custom import as_result
from rlxf.rewards.types import RewardResult


@pytest.mark.parametrize("value, message", [
    ({"score": "0.9"}, "returned score '0.9' (str)"),
    ({"score": None}, "returned score None (NoneType)"),
    ({"score": [1.0]}, "returned score [1.0] (list)"),
    ({"score": 1.0, "metrics": [("a", 1.0)]}, "returned metrics [('a', 1.0)] (list)"),
])
def test_a_dict_with_a_bad_score_or_metrics_names_it(value, message):
    with pytest.raises(TypeError, match="^" + re.escape(f"mod:fn {message}")):
        as_result(value, "mod:fn")


def test_good_dicts_still_pass():
    assert as_result({"score": True}, "f") == RewardResult(1.0)
    assert as_result({"score": 0.5, "metrics": {"n": 2}}, "f") == RewardResult(0.5, {"n": 2.0})
    assert as_result({"score": 0.5, "metrics": None}, "f") == RewardResult(0.5)

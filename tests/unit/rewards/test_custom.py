"""Custom verifiers named as package.module:function."""

import asyncio

import pytest

from rlxf.rewards.custom import CustomVerifier, as_result, load_function
from rlxf.rewards.types import RewardInput, RewardResult


def brevity(sample, max_chars=5):
    return len(sample.response) <= max_chars


def with_metrics(sample):
    return {"score": 0.5, "metrics": {"chars": len(sample.response)}}


async def slow_async(sample, scale=1.0):
    await asyncio.sleep(0)
    return scale * len(sample.response)


def wrong_type(sample):
    return "high"


HERE = __name__


def test_number_bool_dict_and_result_returns():
    x = RewardInput("p", "abc")
    assert CustomVerifier("b", f"{HERE}:brevity").score(x).score == 1.0
    assert CustomVerifier("b", f"{HERE}:brevity", {"max_chars": 2}).score(x).score == 0.0
    assert CustomVerifier("m", f"{HERE}:with_metrics").score(x) == RewardResult(0.5, {"chars": 3})
    assert as_result(RewardResult(2.0), "f") == RewardResult(2.0)


def test_async_functions_work_sync_and_batched():
    v = CustomVerifier("a", f"{HERE}:slow_async", {"scale": 2.0})
    assert v.score(RewardInput("p", "abcd")).score == 8.0
    results = asyncio.run(v.ascore_batch([RewardInput("p", "a"), RewardInput("p", "ab")]))
    assert [r.score for r in results] == [2.0, 4.0]


def test_errors_name_the_problem():
    with pytest.raises(ImportError, match="cannot import module 'no_such_module_xyz'"):
        load_function("no_such_module_xyz:f")
    with pytest.raises(AttributeError, match="has no function 'missing'"):
        load_function(f"{HERE}:missing")
    with pytest.raises(TypeError, match="returned str"):
        CustomVerifier("w", f"{HERE}:wrong_type").score(RewardInput("p", "x"))

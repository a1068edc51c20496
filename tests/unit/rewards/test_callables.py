"""CallableVerifier: plain Python reward functions in three call styles."""

from __future__ import annotations

import math

import pytest

from rlxf.rewards.callables import CallableVerifier, call_style
from rlxf.rewards.types import RewardInput


def _inputs() -> list[RewardInput]:
    return [RewardInput(prompt="1+1=", response="2", ground_truth="2", metadata={"level": 0, "src": "a"}),
            RewardInput(prompt="2+3=", response="6", ground_truth="5", metadata={"level": 1, "src": "b"})]


def test_call_style_from_parameter_names():
    assert call_style(lambda sample: 0.0) == "sample"
    assert call_style(lambda x, bonus=1: 0.0) == "sample"
    assert call_style(lambda samples: []) == "batched"
    assert call_style(lambda prompts, completions, **kw: []) == "trl"
    assert call_style(lambda completions, prompts, answer: []) == "trl"


def test_per_sample_function():
    v = CallableVerifier("exact", lambda s: float(s.response == s.ground_truth))
    assert [r.score for r in v.score_batch(_inputs())] == [1.0, 0.0]
    assert v.batch_size == 1


def test_batched_function_gets_the_batch_once():
    calls = []

    def lengths(samples):
        calls.append(len(samples))
        return [len(s.prompt) for s in samples]

    v = CallableVerifier("lengths", lengths)
    assert [r.score for r in v.score_batch(_inputs())] == [4.0, 4.0]
    assert calls == [2]


def test_trl_function_gets_text_lists_and_columns():
    got = {}

    def trl(prompts, completions, answer, level, **kwargs):
        got.update(prompts=prompts, completions=completions, answer=answer, level=level, kwargs=kwargs)
        return [1.0 if c == a else 0.0 for c, a in zip(completions, answer)]

    v = CallableVerifier("trl", trl)
    assert [r.score for r in v.score_batch(_inputs())] == [1.0, 0.0]
    assert got == {"prompts": ["1+1=", "2+3="], "completions": ["2", "6"], "answer": ["2", "5"],
                   "level": [0, 1], "kwargs": {"src": ["a", "b"]}}


def test_trl_function_without_kwargs_gets_only_what_it_names():
    v = CallableVerifier("trl", lambda prompts, completions, level: [float(x) for x in level])
    assert [r.score for r in v.score_batch(_inputs())] == [0.0, 1.0]


def test_none_is_that_samples_failure_and_a_wrong_length_is_an_error():
    v = CallableVerifier("partial", lambda prompts, completions: [None, 0.25])
    first, second = v.score_batch(_inputs())
    assert math.isnan(first.score) and "returned None" in first.error
    assert second.score == 0.25 and second.error is None
    with pytest.raises(ValueError, match="returned 1 scores for a batch of 2"):
        CallableVerifier("short", lambda samples: [1.0]).score_batch(_inputs())


def test_async_function():
    async def later(sample):
        return 0.5

    assert [r.score for r in CallableVerifier("later", later).score_batch(_inputs())] == [0.5, 0.5]

"""rlxf.train's Python reward functions honour reward.timeout_s: a call past it is stopped and
its samples are recorded as timeouts, on the thread that scores (where math-verify works). What
they return is read as a number wherever it is one (numpy, torch), and a score that is not one is
that sample's error, never the batch's."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import torch

from rlxf.config.reward import RewardConfig
from rlxf.rewards import LocalReward, RewardInput, RewardResult
from rlxf.rewards.callables import CallableVerifier, call_limited


def _spin(seconds: float) -> None:
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        pass


def _scorer(name: str, fn, timeout_s: float = 0.2) -> LocalReward:
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "custom", "name": name, "function": f"x:{name}"}],
                                       "timeout_s": timeout_s})
    return LocalReward(cfg, verifiers={name: CallableVerifier(name, fn, timeout_s=timeout_s)})


def test_a_hung_per_sample_function_times_out_and_the_others_score():
    threads = []

    def hangs_on_b(sample):
        threads.append(threading.get_ident())
        if sample.response == "b":
            _spin(5)
        return 1.0

    with _scorer("hangs_on_b", hangs_on_b) as scorer:
        t = time.monotonic()
        out = scorer.score([RewardInput("q", "a"), RewardInput("q", "b"), RewardInput("q", "c")])
    assert time.monotonic() - t < 3
    assert [s.reward for s in out] == [1.0, 0.0, 1.0]
    assert out[1].failures["hangs_on_b"].kind == "timeout" and not out[0].failures and not out[2].failures
    assert set(threads) == {threading.get_ident()}   # run on the scoring thread, as before


def test_a_hung_trl_function_times_out_its_whole_batch():
    def stuck(prompts, completions, **kw):
        _spin(5)
        return [1.0] * len(completions)

    with _scorer("stuck", stuck) as scorer:
        out = scorer.score([RewardInput("q", "a"), RewardInput("q", "b")])
    assert [s.failures["stuck"].kind for s in out] == ["timeout", "timeout"]


def test_a_function_that_swallows_the_stop_is_still_a_timeout():
    def stubborn(sample):
        try:
            _spin(5)
        except BaseException:  # noqa: BLE001 - what a careless reward function does
            return 1.0
        return 1.0

    with _scorer("stubborn", stubborn) as scorer:
        out = scorer.score([RewardInput("q", "a")])
    assert out[0].failures["stubborn"].kind == "timeout" and out[0].reward == 0.0


def test_an_async_function_is_cancelled_at_its_await():
    async def slow(sample):
        await asyncio.sleep(5)
        return 1.0

    with _scorer("slow", slow) as scorer:
        t = time.monotonic()
        out = scorer.score([RewardInput("q", "a")])
    assert time.monotonic() - t < 3 and out[0].failures["slow"].kind == "timeout"


def test_a_call_within_the_limit_is_untouched_and_the_stop_never_lands_later():
    for _ in range(200):   # calls that end right around the limit: the stop must not reach the caller
        try:
            assert call_limited(_spin, 0.001, "f", 0.001) is None
        except asyncio.TimeoutError:
            pass
    _spin(0.05)   # a stray stop would be raised here
    v = CallableVerifier("exact", lambda s: float(s.response == "2"), timeout_s=5)
    assert [r.score for r in v.score_batch([RewardInput("q", "2"), RewardInput("q", "3")])] == [1.0, 0.0]


def test_errors_still_raise_as_themselves():
    def broken(sample):
        raise KeyError("missing")

    with pytest.raises(KeyError):
        CallableVerifier("broken", broken, timeout_s=5).score(RewardInput("q", "a"))


def _one(fn, name: str = "f") -> list:
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "custom", "name": name, "function": f"x:{name}"}]})
    with LocalReward(cfg, verifiers={name: CallableVerifier(name, fn)}) as scorer:
        return scorer.score([RewardInput("q", "a"), RewardInput("q", "b")])


@pytest.mark.parametrize("score", ["0.9", None, [1.0]])
def test_a_reward_result_whose_score_is_no_number_is_that_samples_error_not_a_dead_batch(score):
    out = _one(lambda sample: RewardResult(score) if sample.response == "a" else 1.0)
    assert out[0].reward == 0.0 and "the score must be a number" in out[0].failures["f"].message
    assert "in its RewardResult" in out[0].failures["f"].message
    assert out[1].reward == 1.0 and not out[1].failures


def test_numpy_and_torch_scalars_are_numbers():
    out = _one(lambda sample: np.bool_(sample.response == "a"))
    assert [s.reward for s in out] == [1.0, 0.0] and not out[0].failures
    assert [s.reward for s in _one(lambda sample: np.array(0.5))] == [0.5, 0.5]
    out = _one(lambda sample: {"score": torch.tensor(0.25), "metrics": {"len": np.int64(3), "ok": np.bool_(True)}})
    assert [s.reward for s in out] == [0.25, 0.25] and out[0].metrics == {"f/len": 3.0, "f/ok": 1.0}
    out = _one(lambda prompts, completions: torch.tensor([0.5, 2.0]))   # a TRL function's tensor of scores
    assert [s.reward for s in out] == [0.5, 2.0]


def test_a_non_text_error_becomes_text():
    out = _one(lambda sample: RewardResult(1.0, error=404))
    assert out[0].failures["f"].message == "404"

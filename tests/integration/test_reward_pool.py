"""The reward pool's isolation: a verifier that raises, hangs or kills its worker costs that
sample an error score, never the batch; counts show up in the metrics; the pool keeps going.

The misbehaving verifiers below are ordinary custom verifiers (``test_reward_pool:<fn>``);
worker processes import this module by name, as they would a user's.
"""

from __future__ import annotations

import os
import time

import pytest

from rlxf.config.reward import RewardConfig
from rlxf.rewards import LocalReward, RewardInput, VerifierFailure, batch_metrics
from rlxf.rewards.pool import VerifierPool

HERE = __name__


def moody(sample):
    """Misbehaves according to the response text."""
    text = sample.response
    if text == "raise":
        raise ValueError("verifier bug")
    if text == "hang":
        time.sleep(3600)
    if text == "spin":
        while True:
            pass
    if text == "crash":
        os._exit(3)            # the worker process dies mid-call
    if text == "abort":
        os.abort()             # SIGABRT, like a segfaulting extension
    return float(len(text))


def fresh_pid(sample):
    return float(os.getpid())


def cfg(workers: int, timeout_s: float = 2.0, **extra) -> RewardConfig:
    return RewardConfig.model_validate({
        "verifiers": [{"type": f"{HERE}:moody", "name": "moody"}, {"type": "math", "weight": 0.5}],
        "workers": workers, "timeout_s": timeout_s, "error_score": -1.0, **extra})


def inputs(*texts: str) -> list[RewardInput]:
    return [RewardInput("q", t, "4") for t in texts]


@pytest.mark.parametrize("workers", [1, 2])
def test_raise_hang_and_crash_are_recorded_per_sample(workers):
    with LocalReward(cfg(workers)) as scorer:
        batch = inputs("ok", "raise", "hang", "four", "crash", "<answer>4</answer>", "abort", "xy")
        start = time.monotonic()
        out = scorer.score(batch)
        elapsed = time.monotonic() - start
        kinds = {i: s.failures["moody"].kind for i, s in enumerate(out) if "moody" in s.failures}
        assert kinds == {1: "error", 2: "timeout", 4: "crash", 6: "crash"}
        assert "ValueError: verifier bug" in out[1].failures["moody"].message
        # healthy samples on the same workers still scored: moody = len(text), math = 1 if "4"
        assert [s.scores["moody"] for s in out] == [2.0, -1.0, -1.0, 4.0, -1.0, 18.0, -1.0, 2.0]
        assert out[5].scores["math"] == 1.0 and out[5].reward == pytest.approx(18.5)
        assert out[1].reward == pytest.approx(-1.0 + 0.5 * 0.0)
        assert elapsed < 2.0 * 2 + 10  # one timeout per hang, not a stalled batch
        m = batch_metrics(out)
        assert (m["reward/errors"], m["reward/timeouts"], m["reward/crashes"]) == (4, 1, 2)
        assert m["reward/moody/failures"] == 4
        # the pool replaced what it killed and keeps working
        again = scorer.score(inputs("abc", "<answer>5</answer>"))
        assert [s.scores["moody"] for s in again] == [3.0, 18.0] and not any(s.failures for s in again)
        assert scorer._pool.counts == {"timeouts": 1, "crashes": 2, "restarts": 3}


def test_cpu_spinning_verifier_is_killed():
    with LocalReward(cfg(1, timeout_s=1.0)) as scorer:
        out = scorer.score(inputs("spin", "ok"))
        assert out[0].failures["moody"].kind == "timeout" and out[1].scores["moody"] == 2.0


def test_in_process_pool_abandons_a_hung_call_and_continues():
    # workers=0: a thread lane; a hung call cannot be killed, only abandoned
    with LocalReward(cfg(0, timeout_s=1.0)) as scorer:
        out = scorer.score(inputs("hang", "raise", "abc"))
        assert [s.failures.get("moody", VerifierFailure("none", "")).kind for s in out] == ["timeout", "error", "none"]
        assert out[2].scores["moody"] == 3.0


def test_workers_run_in_separate_processes_and_in_parallel():
    config = RewardConfig.model_validate({"verifiers": [{"type": f"{HERE}:fresh_pid"}], "workers": 2})
    with LocalReward(config) as scorer:
        pids = {s.scores["fresh_pid"] for s in scorer.score(inputs(*"abcdefghijklmnopqrstuvwxyz" * 4))}
    assert len(pids) == 2 and os.getpid() not in pids


def test_a_verifier_that_cannot_be_built_fails_at_start():
    bad = RewardConfig.model_validate({"verifiers": [{"type": "no_such_module_xyz:f"}], "workers": 1})
    with pytest.raises(RuntimeError, match="cannot import module 'no_such_module_xyz'"):
        LocalReward(bad)


def test_pool_submit_directly_and_close_fails_pending():
    from rlxf.config.reward import CustomVerifierConfig

    pool = VerifierPool([CustomVerifierConfig(function=f"{HERE}:moody")], workers=1, timeout_s=5)
    try:
        done = [f.result(timeout=30) for f in pool.submit(0, inputs("abc", "raise"))]
        assert done[0].score == 3.0 and isinstance(done[1], VerifierFailure)
        pending = pool.submit(0, inputs("hang", "x"))
    finally:
        pool.close()
    assert all(isinstance(f.result(timeout=5), VerifierFailure) for f in pending)
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(0, inputs("x"))

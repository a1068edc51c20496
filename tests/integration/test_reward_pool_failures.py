"""A pool that cannot restart its worker fails fast (never hangs) and says so
in /health; calls nobody waits for any more stop taking a worker; a non-numeric metric fails
only its sample; RemoteReward splits a batch refused for its body size."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import httpx
import pytest
from reward_server_helpers import server_in_thread

from rlxf.config.reward import RewardConfig, RewardServerConfig
from rlxf.rewards import LocalReward, RemoteReward, RewardInput, VerifierFailure
from rlxf.rewards.custom import as_result
from rlxf.rewards.pool import START_ATTEMPTS, VerifierPool
from rlxf.rewards.scorer import combine
from rlxf.rewards.server import server_config
from rlxf.rewards.types import RewardResult, ScoredSample

HERE = __name__


def crashy(sample):
    if sample.response == "crash":
        os._exit(3)
    return 1.0


def sleepy(sample):
    if sample.response == "slow":
        time.sleep(60)
    elif sample.response == "nap":
        time.sleep(3)
    return 1.0


def str_metric(sample):
    if sample.response == "bad":
        return {"score": 1.0, "metrics": {"tag": "abc"}}
    return {"score": 1.0, "metrics": {"n": 2}}


def crashy_cfg(workers: int = 1) -> RewardConfig:
    return RewardConfig.model_validate({"verifiers": [{"type": f"{HERE}:crashy", "name": "c"}],
                                        "workers": workers, "timeout_s": 5.0})


def _dying_lanes(pool: VerifierPool, times: int | None) -> list[int]:
    """Make the next ``times`` (None: all) replacement workers die while starting."""
    real, killed = pool._new_lane, []

    def new_lane():
        lane = real()
        if times is None or len(killed) < times:
            lane.proc.kill()
            killed.append(lane.proc.pid)
        return lane

    pool._new_lane = new_lane
    return killed


def test_a_replacement_dying_while_starting_is_retried():
    with LocalReward(crashy_cfg()) as scorer:
        killed = _dying_lanes(scorer._pool, 1)
        assert scorer.score([RewardInput("q", "crash")])[0].failures["c"].kind == "crash"
        out = scorer.score([RewardInput("q", "fine")])  # used to hang: no lane left
        assert len(killed) == 1 and out[0].reward == 1.0 and not out[0].failures
        assert scorer.problem is None


def test_no_startable_worker_fails_every_call_at_once_with_a_reason():
    pool = VerifierPool(crashy_cfg().verifiers, workers=1, timeout_s=5.0)
    try:
        killed = _dying_lanes(pool, None)
        assert pool.submit(0, [RewardInput("q", "crash")])[0].result(30).kind == "crash"
        queued = pool.submit(0, [RewardInput("q", "a"), RewardInput("q", "b")])
        for f in queued:  # queued while the pool was still retrying, or after: never hangs
            out = f.result(30)
            assert isinstance(out, VerifierFailure) and "no reward worker could be started" in out.message
        assert len(killed) == START_ATTEMPTS and pool.broken
        start = time.monotonic()
        later = pool.submit(0, [RewardInput("q", "c")])[0].result(5)
        assert isinstance(later, VerifierFailure) and time.monotonic() - start < 1
    finally:
        pool.close()


def test_a_replacement_that_hangs_while_starting_is_given_up_on():
    pool = VerifierPool(crashy_cfg().verifiers, workers=1, timeout_s=5.0)
    pool.start_timeout_s = 1.0   # for the replacements only: the first worker's start, under load, may take longer
    real, stopped = pool._new_lane, []

    def hanging_lane():   # never says ready: as a verifier whose import blocks would
        lane = real()
        os.kill(lane.proc.pid, signal.SIGSTOP)
        stopped.append(lane.proc.pid)
        return lane

    try:
        pool._new_lane = hanging_lane
        assert pool.submit(0, [RewardInput("q", "crash")])[0].result(30).kind == "crash"
        out = pool.submit(0, [RewardInput("q", "a")])[0].result(30)   # used to wait for ever
        assert isinstance(out, VerifierFailure) and "not ready within 1s" in out.message
        assert len(stopped) == START_ATTEMPTS and pool.broken
    finally:
        pool.close()


def test_a_call_cancelled_as_its_result_arrives_is_let_go():
    """A caller may cancel at any moment from its own thread; resolving that future raised in the
    dispatcher thread and stopped the pool for good."""
    from concurrent.futures import Future

    from rlxf.rewards.pool import _Call

    call = _Call(1, 0, RewardInput("q", "r"), Future())
    assert call.future.cancel()
    VerifierPool._finish(call, 1.0)       # no InvalidStateError
    assert call.future.cancelled()


def sleepy_cfg(workers: int) -> RewardConfig:
    return RewardConfig.model_validate({"verifiers": [{"type": f"{HERE}:sleepy", "name": "s"}],
                                        "workers": workers, "timeout_s": 120.0})


@pytest.mark.parametrize("workers", [0, 1])
def test_cancelled_calls_free_their_worker(workers):
    pool = VerifierPool(sleepy_cfg(workers).verifiers, workers=workers, timeout_s=120.0)
    try:
        running = pool.submit(0, [RewardInput("q", "slow")] * 3)   # one packet, on the only lane
        time.sleep(0.5)
        queued = pool.submit(0, [RewardInput("q", "slow")] * 2)
        for f in running + queued:
            assert f.cancel()
        # not after the cancelled calls' 3 x 60 s
        assert pool.submit(0, [RewardInput("q", "fine")])[0].result(45).score == 1.0
        assert pool.counts["timeouts"] == pool.counts["crashes"] == 0
    finally:
        pool.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_live_calls_do_not_wait_behind_a_cancelled_one(workers):
    """The lane's current call is cancelled, the calls after it in its packet are not: they ran
    only after it (60 s), as the lane was replaced only when every call of its packet was."""
    pool = VerifierPool(sleepy_cfg(workers).verifiers, workers=workers, timeout_s=120.0)
    try:
        slow, *fine = pool.submit(0, [RewardInput("q", "slow"), RewardInput("q", "fine"), RewardInput("q", "fine")])
        time.sleep(0.5)                                   # (one packet: the three are queued together)
        assert slow.cancel()
        assert [f.result(45).score for f in fine] == [1.0, 1.0]
    finally:
        pool.close()


def test_a_call_cancelled_while_queued_is_never_handed_to_a_lane():
    """Cancelled between two looks of the dispatcher, a queued call was handed to the next free
    lane with the live calls queued after it, which then waited behind it: the full suite's
    flake of the test above (the replacement lane "served nothing within 45 s")."""
    pool = VerifierPool(sleepy_cfg(0).verifiers, workers=0, timeout_s=120.0)
    try:
        pool._wake_if_cancelled = lambda future: None     # the dispatcher does not see the cancel
        first = pool.submit(0, [RewardInput("q", "nap")])  # the lane is busy for 3 s
        time.sleep(0.2)
        cancelled, fine = pool.submit(0, [RewardInput("q", "slow"), RewardInput("q", "fine")])
        assert cancelled.cancel()
        assert first[0].result(45).score == 1.0
        assert fine.result(45).score == 1.0               # not after the cancelled call's 60 s
    finally:
        pool.close()


def test_a_client_that_hangs_up_does_not_hold_the_reward_workers():
    with LocalReward(sleepy_cfg(1)) as scorer, serving(scorer, RewardServerConfig()) as url:
        remote = RemoteReward(url, retries=0, timeout_s=1.0)
        assert remote.score([RewardInput("q", "slow")])[0].failures   # gives up after 1 s, hangs up
        start = time.monotonic()
        out = RemoteReward(url, retries=0, timeout_s=30.0).score([RewardInput("q", "fine")])
        assert out[0].reward == 1.0 and time.monotonic() - start < 20


def test_a_non_numeric_metric_fails_only_its_sample():
    with pytest.raises(TypeError, match="'tag'"):
        as_result({"score": 1.0, "metrics": {"tag": "abc"}}, "m:f")
    assert as_result({"score": 1, "metrics": {"n": True}}, "m:f").metrics == {"n": 1.0}
    # a RewardResult with a bad metric (from any verifier) is that verifier's failure, not a raise
    s = combine(["a"], [1.0], [RewardResult(1.0, {"x": "abc"})], accuracy="a", error_score=-1.0)
    assert s.reward == -1.0 and "'x'" in s.failures["a"].message
    for value in (float("nan"), float("inf")):   # not JSON: fails the sample too
        s = combine(["a"], [1.0], [RewardResult(1.0, {"x": value})], accuracy="a", error_score=-1.0)
        assert s.reward == -1.0 and "not a finite number" in s.failures["a"].message
        with pytest.raises(TypeError, match="finite"):
            as_result({"score": 1.0, "metrics": {"m": value}}, "m:f")
    cfg = RewardConfig.model_validate({"verifiers": [{"type": f"{HERE}:str_metric", "name": "s"}],
                                       "workers": 0, "error_score": -1.0})
    with LocalReward(cfg) as scorer:
        bad, good = scorer.score([RewardInput("q", "bad"), RewardInput("q", "good")])
    assert bad.reward == -1.0 and "'tag'" in bad.failures["s"].message
    assert good.reward == 1.0 and good.metrics == {"s/n": 2.0}


class FakeScorer:
    names = ["fake"]
    accuracy = "fake"
    problem = None

    async def ascore(self, batch):
        return [ScoredSample(reward=1.0, scores={"fake": 1.0}, correct=True, uid=x.uid) for x in batch]


@contextlib.contextmanager
def serving(scorer, limits: RewardServerConfig):
    with server_in_thread(server_config(scorer, limits, "127.0.0.1", 0, log_level="warning")) as port:
        yield f"http://127.0.0.1:{port}"


def test_health_is_unhealthy_when_the_scorer_cannot_score():
    scorer = FakeScorer()
    with serving(scorer, RewardServerConfig()) as url:
        assert httpx.get(f"{url}/health").json()["status"] == "ok"
        scorer.problem = "no reward worker could be started"
        resp = httpx.get(f"{url}/health")
        assert resp.status_code == 503 and resp.json()["status"] == "unhealthy"
        assert "no reward worker" in resp.json()["error"]


def test_remote_reward_halves_a_batch_refused_for_its_body_size():
    with serving(FakeScorer(), RewardServerConfig(max_body_mb=0.05)) as url:  # ~52 kB
        remote = RemoteReward(url, retries=0)
        batch = [RewardInput("p", "r", "t" * 2000, uid=str(i)) for i in range(64)]  # ~130 kB in all
        out = remote.score(batch)
        assert [s.uid for s in out] == [str(i) for i in range(64)]
        assert not any(s.failures for s in out)
        batch[5] = RewardInput("p", "r", "t" * 100_000, uid="5")  # one sample alone is too big
        out = remote.score(batch)
        assert [s.uid for s in out] == [str(i) for i in range(64)]
        assert [i for i, s in enumerate(out) if s.failures] == [5]
        assert "413" in out[5].failures["remote"].message

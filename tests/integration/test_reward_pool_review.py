"""The reward pool under a run's signals and its own timeouts: a SIGTERM or Ctrl-C sent to the
whole process group leaves the pool's workers to their owner (a trainer scoring its last step
must not see crashes); a timed-out call on an in-process lane stops computing."""

from __future__ import annotations

import signal
import threading
import time

from rlxf.config.reward import RewardConfig
from rlxf.rewards.pool import VerifierPool
from rlxf.rewards.types import RewardInput, RewardResult

HERE = __name__


def slow(sample):
    time.sleep(1.0)
    return 1.0


def test_a_worker_outlives_sigterm_and_sigint_and_finishes_its_call():
    cfg = RewardConfig.model_validate({"verifiers": [{"type": f"{HERE}:slow", "name": "s"}], "workers": 1,
                                       "timeout_s": 20.0})
    pool = VerifierPool(cfg.verifiers, workers=1, timeout_s=20.0)
    try:
        (future,) = pool.submit(0, [RewardInput("q", "a")])
        worker = pool._lanes[0].proc
        worker.send_signal(signal.SIGTERM)
        worker.send_signal(signal.SIGINT)
        assert future.result(20) == RewardResult(1.0)
        assert pool.counts["crashes"] == 0 and worker.poll() is None
    finally:
        pool.close()
    assert worker.poll() is not None  # closing the pool still ends it


class Spin:
    """Computes (pure Python) until told to stop or 30 s have passed."""

    name = "spin"

    def __init__(self):
        self.started = threading.Event()
        self.spins = 0

    def score(self, x):
        self.started.set()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            self.spins += 1
        return RewardResult(1.0)


def test_a_timed_out_call_on_a_thread_lane_stops_computing():
    spin = Spin()
    before = set(threading.enumerate())   # lanes other tests abandoned (blocked in a sleep) are not this one's
    pool = VerifierPool(workers=0, timeout_s=0.2, verifiers=[spin])
    try:
        (future,) = pool.submit(0, [RewardInput("q", "a")])
        assert future.result(10).kind == "timeout"
        deadline = time.monotonic() + 10
        while any(t.is_alive() for t in abandoned(pool) if t not in before):
            assert time.monotonic() < deadline, "the abandoned call is still computing"
            time.sleep(0.01)
        spins = spin.spins
        time.sleep(0.1)
        assert spin.spins == spins
    finally:
        pool.close()


def abandoned(pool: VerifierPool) -> list[threading.Thread]:
    """Lane threads that no lane of the pool owns any more."""
    current = {lane.thread for lane in pool._lanes}
    return [t for t in threading.enumerate() if t.name == "rlxf-reward-lane" and t not in current]


def test_a_pool_whose_lane_is_idle_closes_cleanly():
    pool = VerifierPool(workers=0, timeout_s=5, verifiers=[Spin()])
    lane = pool._lanes[0]
    pool.close()
    lane.thread.join(5)
    assert not lane.thread.is_alive()

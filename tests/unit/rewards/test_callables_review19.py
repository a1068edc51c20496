"""call_limited stops calls past their limit with one watchdog thread for every call, not a
timer thread per call (which cost more than many reward functions take)."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from rlxf.rewards.callables import call_limited


def _spin(seconds: float) -> None:
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        pass


def test_many_limited_calls_share_one_watchdog_thread():
    seen: set[threading.Thread] = set()

    def reward(_):
        seen.update(t for t in threading.enumerate() if t is not threading.current_thread())
        return 1.0

    before = set(threading.enumerate())
    assert [call_limited(reward, 5.0, "f", None) for _ in range(20)] == [1.0] * 20
    assert len(seen - before) <= 1   # a timer per call: 20 new threads


def test_a_hung_call_is_stopped_while_another_thread_makes_fast_calls():
    out: dict[str, object] = {}

    def hung() -> None:
        try:
            call_limited(_spin, 0.2, "reward function 'hung'", 5)
        except asyncio.TimeoutError as e:
            out["hung"] = str(e)

    thread = threading.Thread(target=hung)
    thread.start()
    fast = [call_limited(lambda x: x + 1, 30.0, "fast", i) for i in range(2000)]
    thread.join(timeout=10)
    assert fast == list(range(1, 2001))
    assert out["hung"] == "reward function 'hung' ran past reward.timeout_s=0.2s and was stopped"


def test_an_infinite_limit_leaves_later_limits_working():
    assert call_limited(lambda: 3, math.inf, "f") == 3
    with pytest.raises(asyncio.TimeoutError, match="'g' ran past reward.timeout_s=0.1s"):
        call_limited(_spin, 0.1, "'g'", 5)
    assert call_limited(lambda: 4, 0.5, "f") == 4


def test_stops_landing_at_every_moment_of_many_threads_calls_never_leak_nor_wedge_the_watchdog():
    """Calls that end right around their limits, on three threads: a stop landing while a thread
    holds the watchdog's lock must not leave it held, and none may reach the caller's code."""
    problems: list[str] = []

    def worker() -> None:
        for i in range(300):
            try:
                call_limited(_spin, 0.0005 if i % 2 else 0.002, "f", 0.001)
            except asyncio.TimeoutError:
                pass
            except BaseException as e:  # noqa: BLE001 - what the test looks for
                problems.append(repr(e))
            try:
                sum(range(50))   # a stray stop would land here
            except BaseException as e:  # noqa: BLE001
                problems.append(f"leaked: {e!r}")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "the watchdog's lock was left held"
    assert problems == []

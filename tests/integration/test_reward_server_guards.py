"""The reward server fit to expose: body limit, header and body timeouts, bounded connections,
a bearer token (required off loopback), rate-limited logs, and abandoned requests cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time

import httpx
import pytest
from reward_server_helpers import server_in_thread

from rlxf.config.reward import RewardServerConfig
from rlxf.rewards import RemoteReward, RewardInput
from rlxf.rewards.http_guards import RateLimitFilter
from rlxf.rewards.server import check_bind, server_config
from rlxf.rewards.types import ScoredSample


class FakeScorer:
    """A scorer that takes ``delay`` seconds and records whether it was cancelled."""

    names = ["fake"]
    accuracy = "fake"

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.cancelled = threading.Event()

    async def ascore(self, batch):
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return [ScoredSample(reward=1.0, scores={"fake": 1.0}, correct=True, uid=x.uid) for x in batch]


@contextlib.contextmanager
def serving(scorer, limits: RewardServerConfig, host: str = "127.0.0.1"):
    with server_in_thread(server_config(scorer, limits, host, 0, log_level="warning")) as port:
        yield port


def body(n: int = 1) -> dict:
    return {"samples": [{"prompt": "p", "response": "r", "uid": str(i)} for i in range(n)]}


def test_a_body_over_the_limit_is_refused_declared_or_streamed():
    limits = RewardServerConfig(max_body_mb=0.01)
    with serving(FakeScorer(), limits) as port:
        url = f"http://127.0.0.1:{port}/score"
        assert httpx.post(url, json=body(1)).status_code == 200
        big = body(400)  # ~ 20 KB > 10 KB
        declared = httpx.post(url, json=big)
        assert declared.status_code == 413 and "max_body_mb" in declared.text

        def chunks():
            data = httpx.Request("POST", url, json=big).read()
            for k in range(0, len(data), 1000):
                yield data[k:k + 1000]

        streamed = httpx.post(url, content=chunks())  # chunked: no Content-Length to refuse early
        assert streamed.status_code == 413


def test_silent_and_slow_connections_are_closed():
    limits = RewardServerConfig(header_timeout_s=0.5, body_timeout_s=0.5)
    with serving(FakeScorer(), limits) as port:
        silent = socket.create_connection(("127.0.0.1", port))
        silent.settimeout(20)
        assert silent.recv(100) == b"", "a connection that sent nothing stayed open"
        partial = socket.create_connection(("127.0.0.1", port))
        partial.settimeout(20)
        partial.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        assert partial.recv(100) == b""
        slow = socket.create_connection(("127.0.0.1", port))
        slow.settimeout(20)
        slow.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"samp")
        assert b" 408 " in slow.recv(1000).split(b"\r\n")[0]
        for s in (silent, partial, slow):
            s.close()
        assert httpx.post(f"http://127.0.0.1:{port}/score", json=body(1)).status_code == 200


def test_connections_are_bounded():
    limits = RewardServerConfig(max_connections=2)
    with serving(FakeScorer(), limits) as port:
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        deadline = time.monotonic() + 10  # until the server has accepted both
        while (status := httpx.post(f"http://127.0.0.1:{port}/score", json=body(1)).status_code) != 503:
            assert time.monotonic() < deadline, f"a third connection was served ({status})"
            time.sleep(0.05)
        for s in idle:
            s.close()


def test_bearer_token_is_required_when_set(monkeypatch):
    monkeypatch.setenv("RLXF_TEST_REWARD_TOKEN", "s3cret")
    limits = RewardServerConfig(token_env="RLXF_TEST_REWARD_TOKEN")
    with serving(FakeScorer(), limits) as port:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/health").status_code == 401
        assert httpx.post(f"{url}/score", json=body(1), headers={"Authorization": "Bearer nope"}).status_code == 401
        remote = RemoteReward(url, token="s3cret")
        assert [s.reward for s in remote.score([RewardInput("p", "r", None)])] == [1.0]
        with pytest.raises(ConnectionError):
            RemoteReward(url)


def test_binding_beyond_loopback_needs_a_token_and_every_interface_warns(caplog):
    with pytest.raises(ValueError, match="RLXF_REWARD_TOKEN"):
        check_bind("0.0.0.0", None)
    with pytest.raises(ValueError):
        check_bind("10.1.2.3", "")
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    with caplog.at_level(logging.WARNING, logger="rlxf.rewards.server"):
        check_bind("0.0.0.0", "token")
    assert "every network interface" in caplog.text


def test_a_client_that_hangs_up_has_its_batch_cancelled():
    scorer = FakeScorer(delay=60)
    with serving(scorer, RewardServerConfig()) as port:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"http://127.0.0.1:{port}/score", json=body(1), timeout=0.5)
        assert scorer.cancelled.wait(20), "the abandoned batch kept running"


def test_log_lines_of_one_kind_are_rate_limited(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("rlxf.rewards.http_guards.time.monotonic", lambda: now[0])
    limiter = RateLimitFilter(per_minute=3)

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, msg, None, None)

    kept = [limiter.filter(record("Invalid HTTP request received.")) for _ in range(10)]
    assert kept == [True] * 3 + [False] * 7
    assert limiter.filter(record("another kind"))
    now[0] = 61.0
    nxt = record("Invalid HTTP request received.")
    assert limiter.filter(nxt) and "7 log lines suppressed" in nxt.msg

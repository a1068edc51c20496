"""The reward server for real, on loopback: many concurrent clients get every result exactly
once, overload and oversize are refused with a reason, malformed requests get a 4xx, and the
trainer-side RemoteReward matches local scoring."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest
import uvicorn
from reward_server_helpers import server_in_thread

from rlxf.config.reward import RewardConfig, RewardServerConfig
from rlxf.rewards import LocalReward, RemoteReward, RewardInput, build_reward
from rlxf.rewards.server import create_app

HERE = __name__


def echo(sample):
    """The score names the sample: an integer written in its response."""
    return float(sample.response.split()[-1])


def slow(sample):
    time.sleep(0.4)
    return 1.0


@contextlib.contextmanager
def serving(scorer, limits=None):
    """Run the app with uvicorn on a free loopback port in a thread; yield its URL."""
    config = uvicorn.Config(create_app(scorer, limits), host="127.0.0.1", port=0, log_level="warning")
    with server_in_thread(config) as port:
        yield f"http://127.0.0.1:{port}"


def reward_cfg(**extra) -> RewardConfig:
    return RewardConfig.model_validate({
        "verifiers": [{"type": f"{HERE}:echo", "name": "echo"}, {"type": "math", "weight": 0.5}],
        "workers": 1, **extra})


@pytest.fixture(scope="module")
def scorer():
    with LocalReward(reward_cfg()) as s:
        yield s


@pytest.fixture(scope="module")
def url(scorer):
    with serving(scorer, RewardServerConfig(max_batch_size=64, max_concurrent_batches=4, max_waiting=256)) as u:
        yield u


def make_batch(client: int, request: int, size: int) -> list[dict]:
    return [{"prompt": "q", "response": f"<answer>4</answer> {client * 100_000 + request * 1000 + i}",
             "ground_truth": "4", "uid": f"c{client}-r{request}-s{i}"} for i in range(size)]


def test_health(url):
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["verifiers"] == ["echo", "math"] and health["accuracy"] == "echo"
    assert health["max_batch_size"] == 64


def test_many_concurrent_clients_lose_and_duplicate_nothing(url):
    clients, requests_each = 24, 4

    async def client(c: int, http: httpx.AsyncClient) -> list[tuple[str, float, str]]:
        got = []
        for r in range(requests_each):
            batch = make_batch(c, r, size=1 + (7 * c + 3 * r) % 40)
            resp = await http.post(f"{url}/score", json={"samples": batch})
            assert resp.status_code == 200, resp.text
            results = resp.json()["results"]
            assert len(results) == len(batch)
            got += [(s["uid"], res["scores"]["echo"], res["uid"]) for s, res in zip(batch, results, strict=True)]
        return got

    async def main():
        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(timeout=60, limits=limits) as http:
            return await asyncio.gather(*(client(c, http) for c in range(clients)))

    start = time.monotonic()
    per_client = asyncio.run(main())
    elapsed = time.monotonic() - start
    sent = sum(1 + (7 * c + 3 * r) % 40 for c in range(clients) for r in range(requests_each))
    rows = [row for rows in per_client for row in rows]
    assert len(rows) == sent
    assert all(uid_sent == uid_back for uid_sent, _, uid_back in rows)         # in order, none swapped
    assert len({uid for uid, _, _ in rows}) == sent                             # none duplicated
    for uid, score, _ in rows:                                                  # each scored as itself
        c, r, i = (int(part[1:]) for part in uid.split("-"))
        assert score == c * 100_000 + r * 1000 + i
    assert elapsed < 60


@pytest.mark.parametrize("body, status, reason", [
    (b"not json", 422, "JSON"),
    (b'{"samples": [{"prompt": "q"}]}', 422, "response"),
    (b'{"samples": [{"prompt": "q", "response": "r", "response_tokens": -1}]}', 422, "response_tokens"),
    (b'{"samples": [{"prompt": "q", "response": "r", "surprise": 1}]}', 422, "surprise"),
    (b'{"samples": "all of them"}', 422, "samples"),
    (b"{}", 422, "samples"),
])
def test_malformed_requests_get_a_4xx_with_a_reason(url, body, status, reason):
    resp = httpx.post(f"{url}/score", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == status
    assert reason in resp.text


def test_wrong_method_and_oversize_batch(url):
    assert httpx.get(f"{url}/score").status_code == 405
    resp = httpx.post(f"{url}/score", json={"samples": make_batch(0, 0, 65)})
    assert resp.status_code == 413 and "max_batch_size=64" in resp.json()["detail"]


def test_overload_is_refused_with_503_and_the_remote_client_retries_through_it():
    cfg = RewardConfig.model_validate({"verifiers": [{"type": f"{HERE}:slow"}], "workers": 0})
    with LocalReward(cfg) as s, serving(s, RewardServerConfig(max_concurrent_batches=1, max_waiting=0)) as u:
        async def two():
            async with httpx.AsyncClient(timeout=30) as http:
                body = {"samples": make_batch(0, 0, 1)}
                return await asyncio.gather(http.post(f"{u}/score", json=body), http.post(f"{u}/score", json=body))

        codes = sorted(r.status_code for r in asyncio.run(two()))
        assert codes == [200, 503]
        remote = RemoteReward(u, retries=4)
        out = asyncio.run(_gather(remote, [[RewardInput("q", "a", uid="x")], [RewardInput("q", "b", uid="y")]]))
        assert [s.uid for part in out for s in part] == ["x", "y"]
        assert all(s.scores == {"slow": 1.0} and not s.failures for part in out for s in part)


async def _gather(remote, batches):
    return await asyncio.gather(*(remote.ascore(b) for b in batches))


def test_remote_reward_matches_local_scoring_and_splits_big_batches(url, scorer):
    batch = [RewardInput("q", f"<answer>{v}</answer> {k}", "4", uid=f"u{k}") for k, v in enumerate([4, 5] * 75)]
    remote = build_reward(reward_cfg(url=url))
    assert isinstance(remote, RemoteReward) and remote.names == ["echo", "math"] and remote.max_batch_size == 64
    got = remote.score(batch)  # 150 samples -> 3 requests
    want = scorer.score(batch)
    assert [(g.uid, g.reward, g.scores, g.correct) for g in got] == [(w.uid, w.reward, w.scores, w.correct)
                                                                    for w in want]
    assert got[0].reward == pytest.approx(0.0 + 0.5) and got[3].reward == pytest.approx(3.0)


def test_remote_failures_become_sample_errors(url):
    remote = RemoteReward(url, error_score=-2.0)
    out = remote.score([RewardInput("q", "1", ground_truth={1, 2}, uid="set")])  # a set is not JSON
    assert out[0].reward == -2.0 and "JSON" in out[0].error
    with pytest.raises(ConnectionError, match="not reachable"):
        RemoteReward("http://127.0.0.1:9")

"""RemoteReward against a server that answers 200 with something other than rlxf results (a
proxy's page, another service on the port, a server of another version): each sample is failed
with a reason, never a JSONDecodeError that ends the run or a string or NaN reward that reaches
the advantages."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlxf.rewards.scorer import RemoteReward
from rlxf.rewards.types import RewardInput, ScoredSample

HEALTH = {"verifiers": ["a"], "accuracy": "a", "max_batch_size": 8}
GOOD = {"reward": 0.5, "scores": {"a": 0.5}, "correct": False, "failures": {}, "metrics": {"a/x": 1.0}, "uid": "u"}


@contextlib.contextmanager
def fake_server(health: object, score: bytes):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send(json.dumps(health).encode())

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(score)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(5)


@pytest.mark.parametrize(("body", "why"), [
    (b"<html>bad gateway</html>", "Expecting value"),
    (b"[1, 2]", 'no "results" list'),
    (json.dumps({"results": [{"reward": 1}]}).encode(), "result 0: scores is None"),
    (json.dumps({"results": [{**GOOD, "reward": "0.5"}]}).encode(), "result 0: reward is '0.5', not a finite number"),
    (b'{"results": [{"reward": NaN, "scores": {}, "correct": null, "uid": "u"}]}', "reward is nan"),
    (json.dumps({"results": [{**GOOD, "scores": {"a": None}}]}).encode(), "scores['a'] is None"),
    (json.dumps({"results": [{**GOOD, "correct": "yes"}]}).encode(), "correct is 'yes'"),
    (json.dumps({"results": [{**GOOD, "failures": {"a": {"kind": "boom"}}}]}).encode(), "failures"),
    # JSON integers past a float's range raised OverflowError out of score() and ended the run
    (json.dumps({"results": [{**GOOD, "reward": 10**400}]}).encode(), "result 0: reward is 1000"),
    (json.dumps({"results": [{**GOOD, "scores": {"a": -10**400}}]}).encode(), "scores['a'] is -1000"),
    (json.dumps({"results": [{**GOOD, "metrics": {"m": 10**400}}]}).encode(), "metrics['m'] is 1000"),
])
def test_a_200_that_is_not_results_fails_its_samples_with_the_reason(body, why):
    with fake_server(HEALTH, body) as url:
        out = RemoteReward(url, error_score=-1.0, retries=0).score([RewardInput("q", "a", uid="u")])
    assert out[0].reward == -1.0 and out[0].correct is None
    assert "answered 200 with a body that is not rlxf results" in out[0].error and why in out[0].error


def test_good_results_still_parse():
    with fake_server(HEALTH, json.dumps({"results": [GOOD]}).encode()) as url:
        out = RemoteReward(url, retries=0).score([RewardInput("q", "a", uid="u")])
    assert out == [ScoredSample(0.5, {"a": 0.5}, False, {}, {"a/x": 1.0}, "u")]


@pytest.mark.parametrize("health", [{"status": "ok"}, [1], {**HEALTH, "max_batch_size": 0},
                                    {**HEALTH, "verifiers": "a"}])
def test_a_health_answer_that_is_not_a_reward_servers_is_refused_by_name(health):
    with fake_server(health, b"") as url, pytest.raises(ConnectionError, match="not an rlxf reward server"):
        RemoteReward(url)

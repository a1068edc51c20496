"""``SourceRoutedReward`` reports its sources' problems (the reward server's /health reads
``problem``) and closes every source's scorer even when one fails to close."""

import pytest

from rlxf.rewards import SourceRoutedReward


class Fake:
    def __init__(self, name: str, problem: str | None = None, close_error: str | None = None):
        self.names, self.accuracy, self.problem = [name], name, problem
        self.close_error, self.closed = close_error, False

    def close(self) -> None:
        self.closed = True
        if self.close_error:
            raise RuntimeError(self.close_error)


def test_problem_names_the_broken_source():
    healthy = SourceRoutedReward(Fake("a"), {"gsm8k": Fake("b")})
    assert healthy.problem is None
    broken = SourceRoutedReward(Fake("a"), {"gsm8k": Fake("b", problem="no reward worker can be started")})
    assert broken.problem == "source gsm8k: no reward worker can be started"
    assert SourceRoutedReward(Fake("a", problem="dead"), {"x": Fake("b")}).problem == "reward.verifiers: dead"


def test_close_reaches_every_source_after_a_failure():
    default, first, second = Fake("a", close_error="pool stuck"), Fake("b", close_error="also"), Fake("c")
    routed = SourceRoutedReward(default, {"x": first, "y": second})
    with pytest.raises(RuntimeError, match="pool stuck"):
        routed.close()
    assert default.closed and first.closed and second.closed


def test_health_reports_a_routed_problem():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from rlxf.rewards.server import create_app

    routed = SourceRoutedReward(Fake("a"), {"gsm8k": Fake("b", problem="no reward worker can be started")})
    response = TestClient(create_app(routed)).get("/health")
    assert response.status_code == 503 and "source gsm8k" in response.json()["error"]

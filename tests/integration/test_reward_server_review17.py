"""The reward server reads a /score body as JSON whatever its Content-Type (``curl -d`` sends a
form's), and answers every unreadable body with a 422 that says why, never a 500."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from rlxf.rewards.server import create_app
from rlxf.rewards.types import ScoredSample

GOOD = b'{"samples": [{"prompt": "q", "response": "r", "uid": "u1"}]}'


class Echo:
    """A scorer that gives every sample 1.0."""

    names = ["f"]
    accuracy = "f"

    async def ascore(self, batch):
        return [ScoredSample(reward=1.0, scores={"f": 1.0}, correct=True, uid=x.uid) for x in batch]


def _post(body: bytes, content_type: str | None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(Echo()), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://rlxf") as client:
            return await client.post("/score", content=body,
                                     headers={"Content-Type": content_type} if content_type else {})
    return asyncio.run(go())


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain",
                                          "application/json"])
def test_a_json_body_is_scored_whatever_its_content_type(content_type):
    resp = _post(GOOD, content_type)
    assert resp.status_code == 200, resp.text
    assert [r["uid"] for r in resp.json()["results"]] == ["u1"]


@pytest.mark.parametrize("body, reason", [
    (b'{"samples": [{"prompt": "\xff", "response": "r"}]}', "not UTF-8"),
    (b"not json", "not JSON: Expecting value at line 1 column 1"),
    (b'{"samples": [{"prompt": "q", "response": "r", "ground_truth": ' + b"[" * 50_000 + b"]" * 50_000 + b"}]}",
     "recursion"),
    (b'{"samples": [{"prompt": "q", "response": "r", "response_tokens": ' + b"9" * 5000 + b"}]}", "4300 digits"),
    (b'{"samples": [{"prompt": "q", "response": "r", "response_tokens": true}]}', "response_tokens"),
    (b'{"samples": [{"prompt": "q", "response": "r", "max_new_tokens": "64"}]}', "max_new_tokens"),
    (b'{"samples": [{"prompt": "q"}]}', '"loc":["body","samples",0,"response"]'),
])
@pytest.mark.parametrize("content_type", [None, "application/json"])
def test_an_unreadable_body_is_a_422_that_says_why(body, reason, content_type):
    resp = _post(body, content_type)
    assert resp.status_code == 422, resp.text
    assert reason in resp.text

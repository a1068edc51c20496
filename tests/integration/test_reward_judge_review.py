"""The HTTP judge when an OpenAI-compatible server answers ``message.content`` in another shape:
a list of content parts is read as its text; null is a reply without a score; anything else is
that sample's error, and the other samples of the batch are still scored."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlxf.rewards import RewardInput
from rlxf.rewards.judge import JudgeVerifier, OpenAIChatClient

CONTENT = {
    "TEXT": "SCORE: 8",
    "PARTS": [{"type": "text", "text": "Fine.\n"}, {"type": "image_url", "image_url": {"url": "x"}},
              {"type": "text", "text": "SCORE: 6"}],
    "NULL": None,
    "NUMBER": 7,
}


class Judge(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = body["messages"][-1]["content"].rsplit("\n", 1)[-1]
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": CONTENT[key]}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_content_parts_are_read_and_odd_content_fails_only_its_sample(url):
    judge = JudgeVerifier("j", OpenAIChatClient(url, "m", retries=0), rubric="{response}")
    text, parts, null, number = asyncio.run(judge.ascore_batch([RewardInput("q", key) for key in CONTENT]))
    assert (text.score, text.error) == (0.8, None)
    assert (parts.score, parts.error) == (0.6, None)      # "Fine.\n" + "SCORE: 6"
    assert null.error is not None and "no score" in null.error
    assert number.error is not None and "message.content = 7" in number.error

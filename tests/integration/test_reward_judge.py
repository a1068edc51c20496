"""The LLM judge against a real OpenAI-compatible server on loopback (a stdlib http.server
fake that grades by keyword), and the engine adapter against a fake engine."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlxf.config.reward import RewardConfig
from rlxf.rewards import LocalReward, RewardInput, batch_metrics
from rlxf.rewards.judge import EngineChatClient, JudgeVerifier, OpenAIChatClient
from rlxf.types import Completion


class FakeJudge(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: the reply depends on a keyword in the graded response."""

    calls: Counter = Counter()
    bodies: list = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeJudge.bodies.append((self.path, dict(self.headers), body))
        text = body["messages"][-1]["content"]
        key = text.split("Response:\n", 1)[-1].split("\n", 1)[0]
        FakeJudge.calls[key] += 1
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": "no such route"})
        if "DOWN" in key:
            return self._send(503, {"error": "overloaded"})
        if "FLAKY" in key and FakeJudge.calls[key] == 1:
            return self._send(500, {"error": "transient"})
        if "NOJSON" in key:
            return self._send(200, {"choices": []})
        reply = {"GOOD": "Solid work.\nSCORE: 9", "BAD": "Wrong.\nSCORE: 2", "RAMBLE": "Hard to say, really.",
                 "FLAKY": "Fine.\nSCORE: 5", "EDGE": "SCORE: 10",
                 # message.content in other shapes some OpenAI-compatible servers answer
                 "PARTS": [{"type": "text", "text": "Fine.\n"}, {"type": "image_url", "image_url": {"url": "x"}},
                           {"type": "text", "text": "SCORE: 6"}],
                 "NULL": None, "NUMBER": 7}.get(key.split()[0], "SCORE: 0")
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": reply}}]})

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def judge_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeJudge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


RUBRIC = "Question:\n{prompt}\nResponse:\n{response}\nGrade {score_min}-{score_max}; end with SCORE: <n>."


def sample(response):
    return RewardInput("What is 2+2?", response, "4")


def test_http_judge_scores_and_records_unparseable_replies(judge_url, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "judge", "url": judge_url, "model": "grader",
                                                      "rubric": RUBRIC, "api_key_env": "JUDGE_KEY",
                                                      "retries": 1, "timeout_s": 10}]})
    FakeJudge.bodies.clear()
    with LocalReward(cfg) as scorer:
        out = scorer.score([sample("GOOD answer"), sample("BAD answer"), sample("RAMBLE on"),
                            sample("FLAKY once"), sample("DOWN always"), sample("NOJSON"), sample("EDGE")])
    scores = [s.scores["judge"] for s in out]
    assert scores[:2] == [pytest.approx(0.9), pytest.approx(0.2)]
    assert scores[3] == pytest.approx(0.5) and scores[6] == 1.0          # FLAKY retried after a 500
    assert [("judge" in s.failures) for s in out] == [False, False, True, False, True, True, False]
    assert "no score" in out[2].failures["judge"].message
    assert "HTTP 503" in out[4].failures["judge"].message
    assert "choices" in out[5].failures["judge"].message
    assert FakeJudge.calls["DOWN always"] == 2                           # 1 try + 1 retry
    path, headers, body = FakeJudge.bodies[0]
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "grader" and body["temperature"] == 0.0 and body["max_tokens"] == 512
    assert "What is 2+2?" in body["messages"][0]["content"] and "Grade 0-10" in body["messages"][0]["content"]
    assert batch_metrics(out)["reward/judge/failures"] == 3


def test_unreachable_judge_is_an_error_not_a_crash():
    client = OpenAIChatClient("http://127.0.0.1:9/v1", "m", retries=0, timeout_s=2)
    judge = JudgeVerifier("judge", client, rubric=RUBRIC)
    result = judge.score(sample("GOOD"))
    assert result.error is not None and "failed" in result.error


def test_missing_api_key_variable_fails_at_build(judge_url, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "judge", "url": judge_url, "model": "m",
                                                      "api_key_env": "NO_SUCH_KEY_VAR"}]})
    with pytest.raises(ValueError, match="NO_SUCH_KEY_VAR"):
        LocalReward(cfg)


class FakeTokenizer:
    """A character per id, no special tokens (what ``reply_text`` reads of a tokenizer)."""

    all_special_ids, all_special_tokens, added_tokens_decoder, eos_token_id = [], [], {}, None

    def __len__(self):
        return 0x110000

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return [ord(c) for c in messages[-1]["content"]][-50:] or [1]

    def decode(self, ids, skip_special_tokens):
        return "".join(map(chr, ids))


class FakeEngine:
    """generate(prompts, sampling) -> per prompt, n completions; grades by the prompt's last char."""

    def __init__(self):
        self.calls = []

    def generate(self, requests, sampling):
        self.calls.append((len(requests), sampling))
        out = []
        for ids in requests:
            if chr(ids[-1]) == "!":
                out.append([Completion([], [], "error", 0, error="prompt too long")])
            else:
                text = "SCORE: 7" if chr(ids[-1]) == "+" else "meh"
                out.append([Completion([ord(c) for c in text], [0.0] * len(text), "stop", 0)])
        return out


def test_engine_judge_batches_prompts_into_one_generate_call():
    engine = FakeEngine()
    judge = JudgeVerifier("judge", EngineChatClient(engine, FakeTokenizer()), rubric="{response}", max_tokens=16)
    import asyncio

    results = asyncio.run(judge.ascore_batch([sample("good+"), sample("vague"), sample("boom!")]))
    assert results[0].score == pytest.approx(0.7) and results[0].error is None
    assert results[1].error is not None and "no score" in results[1].error
    assert results[2].error == "judge engine: prompt too long"
    (count, sampling), = engine.calls
    assert count == 3 and sampling.n == 1 and sampling.max_new_tokens == 16 and sampling.temperature == 0.0


def test_engine_judge_with_the_real_native_engine(nano_model_dir):
    """backend: engine loads an rlxf rollout engine; the untrained nano model cannot grade, so
    every reply is recorded as unparseable -- what matters is that the whole path runs."""
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "judge", "backend": "engine",
                                                      "model": str(nano_model_dir), "max_tokens": 6}]})
    with LocalReward(cfg) as scorer:
        out = scorer.score([sample("GOOD"), sample("BAD")])
    assert all(s.failures["judge"].kind == "error" and "no score" in s.failures["judge"].message for s in out)
    assert [s.reward for s in out] == [0.0, 0.0]


def test_content_parts_are_read_and_odd_content_fails_only_its_sample(judge_url):
    """A list of content parts is read as its text; null is a reply without a score; anything
    else is that sample's error (it failed the whole batch with a TypeError), and the other
    samples of the batch are still scored."""
    judge = JudgeVerifier("j", OpenAIChatClient(judge_url, "m", retries=0), rubric=RUBRIC)
    good, parts, null, number = asyncio.run(judge.ascore_batch(
        [RewardInput("q", key) for key in ("GOOD", "PARTS", "NULL", "NUMBER")]))
    assert (good.score, good.error) == (0.9, None)
    assert (parts.score, parts.error) == (0.6, None)      # "Fine.\n" + "SCORE: 6"
    assert null.error is not None and "no score" in null.error
    assert number.error is not None and "message.content = 7" in number.error

"""What an outside review of rlxf.envs found: environment outputs of the wrong type (info not a
dict, numpy or overflowing rewards, text that is not Unicode, NaN in infos) end only their episode
or are recorded as JSON, never the step or the run; the calculator's powers stay small; an unclosed
tool call is answered; the chat endpoint refuses content it cannot record."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlxf.envs.agent import EpisodeLimits, run_episodes
from rlxf.envs.base import EnvError, StepResult, build_env
from rlxf.envs.chat_server import EpisodeRecorder, InvalidMessage
from rlxf.envs.programs import _outcome
from rlxf.envs.tokens import encode_text
from rlxf.envs.tools import ToolSet, calculator
from rlxf.metrics.sinks import encode_line
from rlxf.rollout import SamplingParams
from rlxf.types import Completion, Prompt


class FixedEngine:
    """Answers every request with ``text`` as canonical ids + eos."""

    def __init__(self, tokenizer, text):
        self.tokenizer, self.text, self.calls = tokenizer, text, 0

    def generate(self, requests, sampling):
        self.calls += 1
        ids = encode_text(self.tokenizer, self.text)[: sampling.max_new_tokens - 1] + [self.tokenizer.eos_token_id]
        return [[Completion(ids, [-0.5] * len(ids), "stop", 3)] for _ in requests]


class OddEnv:
    """Steps return what the prompt's ground truth names (first: its reset's observation)."""

    RESULTS = {
        "info_none": lambda: StepResult([], reward=1.0, terminated=True, info=None),
        "reward_overflows": lambda: StepResult([], reward=10**400, terminated=True),
        "observation_surrogate": lambda: StepResult([{"role": "user", "content": "x \ud800"}]),
        "reward_numpy": lambda: StepResult([], reward=np.float32(0.5), terminated=True),
        "reward_numpy_int": lambda: StepResult([], reward=np.int64(2), terminated=True),
        "info_odd": lambda: StepResult([], reward=1.0, terminated=True,
                                       info={"distance": float("nan"), (1, 2): "pair", "inf": [float("-inf")]}),
    }

    def reset(self, task):
        self.mode = task.ground_truth
        if self.mode == "first_surrogate":
            return [{"role": "user", "content": "\udcff"}]
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        return self.RESULTS[self.mode]()


def test_malformed_step_results_end_only_their_episode(tokenizer_for_tests):
    modes = ["info_none", "reward_overflows", "observation_surrogate", "first_surrogate", "reward_numpy",
             "reward_numpy_int", "info_odd"]
    ps = [Prompt(uid=m, prompt_ids=[1], prompt_text="", ground_truth=m) for m in modes]
    trajs = run_episodes(FixedEngine(tokenizer_for_tests, "ok"), tokenizer_for_tests, OddEnv, ps, list(range(len(ps))),
                         SamplingParams(n=1, max_new_tokens=4), EpisodeLimits(max_turns=2))
    by = {t.prompt.uid: t for t in trajs}
    errors = {m: by[m].episode["error"] for m in modes}
    assert "step() returned info None (NoneType); it must be a dict" in errors["info_none"]
    assert "(int); it must be a finite number" in errors["reward_overflows"]
    assert "step() observation message 0 (user): its content is not valid Unicode" in errors["observation_surrogate"]
    assert "reset() observation message 0 (user): its content is not valid Unicode" in errors["first_surrogate"]
    for m in modes[:4]:
        assert by[m].finish_reason == "error" and not any(by[m].loss_mask) and by[m].reward == 0.0
    # numpy scalars are numbers: the episodes train, with their rewards as floats
    assert (errors["reward_numpy"], by["reward_numpy"].reward, by["reward_numpy_int"].reward) == (None, 0.5, 2.0)
    assert type(by["reward_numpy"].episode["turn_rewards"][0]) is float
    # an info holding NaN, inf and a tuple key is kept as JSON samples.jsonl can hold
    assert by["info_odd"].episode["infos"] == [{"distance": "nan", "(1, 2)": "pair", "inf": ["-inf"]}]
    for t in trajs:
        json.loads(encode_line({"episode": t.episode}))


def test_a_tool_call_with_nan_arguments_does_not_break_samples_jsonl(tokenizer_for_tests):
    """The model writes `NaN` in a call's arguments (JSON that Python parses): the call fails, and
    its trace in the episode's infos stays writable with allow_nan=False."""
    engine = FixedEngine(tokenizer_for_tests, '<tool_call>{"name": "calculator", "arguments": {"expression": NaN}}'
                                              '</tool_call>')
    circular: dict = {}
    circular["self"] = circular
    ps = [Prompt(uid="a:0", prompt_ids=[1], prompt_text="", ground_truth="2", metadata={"expression": "1+1"})]
    [t] = run_episodes(engine, tokenizer_for_tests, lambda: build_env("tool_arithmetic", {"tools": ToolSet(["calculator"])}),
                       ps, [0], SamplingParams(n=1, max_new_tokens=64), EpisodeLimits(max_turns=1))
    assert t.episode["infos"][0]["tool_trace"][0]["arguments"] == {"expression": "nan"}
    assert t.episode["infos"][0]["tool_errors"] == 1
    json.loads(encode_line({"episode": t.episode}))


def test_calculator_bounds_powers_by_their_digits_not_their_magnitude():
    # a tiny base with a 768-digit denominator: each power multiplies its digits by up to 64
    # (three levels took ~2 s, four would hold the GIL for hours)
    for expr in ("(1/999999999999**64)**64", "((10**700+1)/10**700)**2", "0.1**64"):
        with pytest.raises(ValueError, match="exponents must be integers of at most 64"):
            calculator(expr)
    assert calculator("(1/2)**64") == "1/18446744073709551616"
    assert calculator("0.5**3") == "1/8" and len(calculator("(10**12)**64")) == 769
    assert calculator("2**-3") == "1/8"


def test_an_unclosed_tool_call_is_answered_with_an_error():
    out = ToolSet(["calculator"]).run('<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}'
                                      '</tool_call> and <tool_call>{"name": "calculator", "argu', turn=1)
    assert [m["content"] for m in out.messages] == [
        "6", "error: the <tool_call> block is not closed; end each call with </tool_call>"]
    assert [m["tool_call_id"] for m in out.messages] == ["call_1_0", "call_1_1"]
    assert (out.calls, out.errors, len(out.trace)) == (2, 1, 2)
    # so a turn cut short inside its call is not taken for the final answer
    env = build_env("tool_arithmetic", {"tools": ToolSet(["calculator"])})
    from rlxf.envs.base import EnvTask

    env.reset(EnvTask(uid="a", prompt="", ground_truth="6", metadata={"expression": "2*3"}))
    result = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "6')
    assert not result.terminated and result.info["tool_errors"] == 1


def test_program_rewards_of_numpy_and_overflowing_numbers():
    assert _outcome(np.float32(0.25)) == (0.25, {})
    assert _outcome({"reward": np.int64(1), "success": True}) == (1.0, {"success": True})
    assert "must return a finite reward" in _outcome(10**400)
    assert "must return a finite reward" in _outcome(np.bool_(True))


def test_endpoint_refuses_message_content_it_cannot_record(tokenizer_for_tests):
    recorder = EpisodeRecorder(FixedEngine(tokenizer_for_tests, "hi"), tokenizer_for_tests)
    image = [{"type": "text", "text": "look:"}, {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]
    cases = [([{"role": "user", "content": image}], "messages[0]: content[1] is a 'image_url' part"),
             ([{"role": "system", "content": "s"}, {"role": "user", "content": 5}],
              "messages[1]: content must be a string or a list of text parts, got int"),
             ([{"role": "user", "content": "a\ud800"}], "messages[0]: its content is not valid Unicode"),
             ([{"content": "no role"}], "messages[0]: a message is")]
    for messages, error in cases:
        with pytest.raises(InvalidMessage, match=error.replace("[", r"\[").replace("]", r"\]")):
            recorder.complete("e", messages)
    assert recorder.episodes == {} and recorder.engine.calls == 0
    text_parts = [{"type": "text", "text": "look"}, {"type": "text", "text": " here"}]
    assert recorder.complete("e", [{"role": "user", "content": text_parts}]).text == "hi"
    assert recorder.episodes["e"].messages[0] == {"role": "user", "content": "look here"}


def test_endpoint_answers_bad_content_with_a_400(tokenizer_for_tests):
    from fastapi.testclient import TestClient

    from rlxf.envs.chat_server import create_app

    client = TestClient(create_app(EpisodeRecorder(FixedEngine(tokenizer_for_tests, "hi"), tokenizer_for_tests)))
    r = client.post("/v1/chat/completions", headers={"content-type": "application/json"},
                    content=b'{"user": "e", "messages": [{"role": "user", "content": "a\\ud800"}]}')
    assert r.status_code == 400 and "not valid Unicode" in r.json()["error"]["message"]


def test_unknown_environment_names_plugins():
    with pytest.raises(EnvError, match="list it in `plugins:`"):
        build_env("echo_not_registered")


class ClosingEnv:
    """Records its close(); ground truth picks how its episode ends, and whether close raises."""

    closed: list[str] = []

    def reset(self, task):
        self.mode = task.ground_truth
        if self.mode == "reset_raises":
            raise RuntimeError("no")
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        if self.mode == "terminated_str":
            return StepResult([], reward=1.0, terminated="no")
        if self.mode == "terminated_np":
            return StepResult([], reward=1.0, terminated=np.bool_(True))
        return StepResult([{"role": "user", "content": "again"}], reward=0.0)

    def close(self):
        ClosingEnv.closed.append(self.mode)
        if self.mode == "close_raises":
            raise OSError("already gone")


def test_every_environment_is_closed_when_its_episode_ends(tokenizer_for_tests, caplog):
    ClosingEnv.closed = []
    modes = ["terminated_str", "terminated_np", "max_turns", "close_raises", "reset_raises"]
    ps = [Prompt(uid=m, prompt_ids=[1], prompt_text="", ground_truth=m) for m in modes]
    trajs = run_episodes(FixedEngine(tokenizer_for_tests, "ok"), tokenizer_for_tests, ClosingEnv, ps,
                         list(range(len(ps))), SamplingParams(n=1, max_new_tokens=4), EpisodeLimits(max_turns=2))
    by = {t.prompt.uid: t for t in trajs}
    # one close per environment that was made, failed episodes (a reset that raised) included
    assert sorted(ClosingEnv.closed) == sorted(["terminated_str", "terminated_np", "max_turns", "close_raises",
                                                "reset_raises"])
    assert "close() failed: OSError: already gone" in caplog.text
    # a close that raises changes nothing of its episode
    assert by["close_raises"].episode["error"] is None and by["close_raises"].episode["end"] == "max_turns"
    # terminated must be a bool: "no" would have ended the episode as solved
    assert "terminated='no' (str); it must be True or False" in by["terminated_str"].episode["error"]
    assert by["terminated_np"].episode["end"] == "terminated" and by["terminated_np"].episode["error"] is None


class SuccessEnv:
    """One turn; its ground truth is the ``info["success"]`` it reports."""

    def reset(self, task):
        self.success = {"str": "false", "none": None, "np": np.bool_(False), "one": 1}[task.ground_truth]
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        return StepResult([], reward=0.0, terminated=True, info={"success": self.success})


def test_an_episode_verdict_must_be_a_bool_not_text(tokenizer_for_tests):
    """info["success"] is the episode's accuracy: the string "false" read as true."""
    modes = ["str", "none", "np", "one"]
    ps = [Prompt(uid=m, prompt_ids=[1], prompt_text="", ground_truth=m) for m in modes]
    trajs = run_episodes(FixedEngine(tokenizer_for_tests, "ok"), tokenizer_for_tests, SuccessEnv, ps,
                         list(range(len(ps))), SamplingParams(n=1, max_new_tokens=4), EpisodeLimits(max_turns=2))
    by = {t.prompt.uid: t for t in trajs}
    assert "info['success']='false' (str); it must be True, False or None" in by["str"].episode["error"]
    assert all(by[m].episode["error"] is None for m in ("none", "np", "one"))


def test_a_chat_request_seed_past_the_engines_range_is_a_field_error():
    from pydantic import ValidationError

    from rlxf.envs.chat_protocol import ChatRequest

    with pytest.raises(ValidationError, match="seed"):
        ChatRequest.model_validate({"messages": [{"role": "user", "content": "x"}], "seed": 2**63})

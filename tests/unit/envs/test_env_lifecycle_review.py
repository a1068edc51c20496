"""What a second outside review of rlxf.envs found: an environment whose constructor, reset or
step returned after env.step_timeout_s was closed before that call returned, or never; a run
stopped by a configuration error left its environments open; the agent loop and the chat
endpoint counted env.max_turns differently for turns of no tokens; a numpy verdict of False read
as correct, and an info's tool_errors that was no count stopped the run."""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

from rlxf.envs.agent import EpisodeLimits, run_episodes
from rlxf.envs.base import StepResult
from rlxf.envs.chat_server import EpisodeLimit, EpisodeRecorder
from rlxf.envs.programs import _outcome
from rlxf.envs.rollout import score_episodes
from rlxf.envs.tokens import TemplateAppendError, encode_text
from rlxf.rollout import SamplingParams
from rlxf.types import Completion, Prompt


class OkEngine:
    """Answers every request with "ok" + eos."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, requests, sampling):
        ids = encode_text(self.tokenizer, "ok") + [self.tokenizer.eos_token_id]
        return [[Completion(ids, [-0.5] * len(ids), "stop", 0)] for _ in requests]


class LateEnv:
    """Blocks in the call its ground truth names (``init``, ``reset`` or ``step``) until the test
    releases it, then acquires something (a process, a container); ``close`` records what it held."""

    release = threading.Event()
    closes: list[tuple[str, bool]] = []
    all_closed = threading.Event()
    expected = 0

    def __init__(self, mode):
        self.mode, self.held = mode, False
        if mode == "init":
            self._late()

    def _late(self):
        LateEnv.release.wait(30)
        self.held = True

    def reset(self, task):
        if self.mode == "reset":
            self._late()
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        if self.mode == "step":
            self._late()
        return StepResult([], reward=1.0, terminated=True)

    def close(self):
        LateEnv.closes.append((self.mode, self.held))
        if len(LateEnv.closes) == LateEnv.expected:
            LateEnv.all_closed.set()


def test_an_environment_whose_call_returns_after_the_timeout_is_closed_after_it_returns(tokenizer_for_tests):
    """close() ran while a late constructor / reset / step was still running (or, for a late
    constructor, never): what the call acquired after that close stayed held until exit, and the
    environment, documented as needing no locks, was closed under a running call."""
    LateEnv.release, LateEnv.closes, LateEnv.all_closed, LateEnv.expected = (threading.Event(), [],
                                                                              threading.Event(), 4)
    modes = ["init", "reset", "step", "none"]
    made = iter(modes)
    lock = threading.Lock()

    def make_env():
        with lock:
            mode = next(made)
        return LateEnv(mode)

    ps = [Prompt(uid=m, prompt_ids=[1], prompt_text="", ground_truth=m) for m in modes]
    trajs = run_episodes(OkEngine(tokenizer_for_tests), tokenizer_for_tests, make_env, ps, list(range(4)),
                         SamplingParams(n=1, max_new_tokens=4), EpisodeLimits(max_turns=2, step_timeout_s=0.3))
    assert [t.episode["end"] for t in trajs] == ["error", "error", "error", "terminated"]
    assert "did not return within 0.3 s" in trajs[2].episode["error"]
    # only the environment no call of which is still running is closed when run_episodes returns
    assert LateEnv.closes == [("none", False)]
    LateEnv.release.set()
    assert LateEnv.all_closed.wait(10)
    # each closed once, after its late call returned, holding what that call acquired
    assert sorted(LateEnv.closes) == [("init", True), ("none", False), ("reset", True), ("step", True)]


class HoldingEnv:
    made: list[HoldingEnv] = []

    def __init__(self):
        self.closed = 0
        HoldingEnv.made.append(self)

    def reset(self, task):
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        return StepResult([], terminated=True)

    def close(self):
        self.closed += 1


def test_environments_are_closed_when_a_configuration_error_stops_the_run(tokenizer_for_tests):
    """A tokenizer without a chat template stops the run after every environment was made and
    reset, and none of them was closed."""
    tok = copy.deepcopy(tokenizer_for_tests)
    tok.chat_template = None
    HoldingEnv.made = []
    with pytest.raises(TemplateAppendError, match="need a chat template"):
        run_episodes(OkEngine(tok), tok, HoldingEnv, [Prompt("a", [1], "", "")], [0],
                     SamplingParams(n=3, max_new_tokens=4), EpisodeLimits())
    assert [e.closed for e in HoldingEnv.made] == [1, 1, 1]


class EmptyEngine:
    """A turn of no tokens at all (an engine of a plugin may return one)."""

    def generate(self, requests, sampling):
        return [[Completion([], [], "stop", 0)] for _ in requests]


class ChattyEnv:
    def reset(self, task):
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        return StepResult([{"role": "user", "content": "again"}])


def test_both_paths_count_a_turn_of_no_tokens_towards_max_turns(tokenizer_for_tests):
    """The endpoint counted only turns that held tokens: a program whose turns came back empty was
    never stopped by env.max_turns (and its trajectory said 0 turns), while the agent loop stopped
    the same script after max_turns and said max_turns turns."""
    tok = tokenizer_for_tests
    [t] = run_episodes(EmptyEngine(), tok, ChattyEnv, [Prompt("a", [1], "", "")], [0],
                       SamplingParams(n=1, max_new_tokens=4), EpisodeLimits(max_turns=2))
    assert (t.episode["end"], t.episode["turns"]) == ("max_turns", 2)

    recorder = EpisodeRecorder(EmptyEngine(), tok, max_turns=2)
    messages = [{"role": "user", "content": "go"}]
    for _ in range(2):
        recorder.complete("e", messages)
        messages += [{"role": "assistant", "content": ""}, {"role": "user", "content": "again"}]
    with pytest.raises(EpisodeLimit, match=r"had its 2 turns \(env.max_turns\)"):
        recorder.complete("e", messages)
    [r] = recorder.trajectories()
    assert r.episode["turns"] == t.episode["turns"] == 2


class InfoEnv:
    """One turn; its ground truth picks the info of its step."""

    INFOS = {"np_false": {"success": np.bool_(False), "distance": np.float32(0.5), "cells": np.arange(3),
                          np.int64(4): "key"},
             "np_true": {"success": np.bool_(True), "tool_errors": np.int64(2)},
             "errors_listed": {"success": True, "tool_errors": ["bad call"]},
             "errors_none": {"tool_errors": None}}

    def reset(self, task):
        self.info = self.INFOS[task.ground_truth]
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        return StepResult([], reward=1.0, terminated=True, info=self.info)


def test_an_info_is_read_as_its_values_and_a_wrong_one_names_the_environment_and_field(tokenizer_for_tests):
    """info["success"] = np.bool_(False) was recorded as the text "np.False_", which scored as
    correct; info["tool_errors"] holding a list stopped the run in score_episodes (TypeError)."""
    modes = list(InfoEnv.INFOS)
    ps = [Prompt(uid=m, prompt_ids=[1], prompt_text="", ground_truth=m) for m in modes]
    trajs = run_episodes(OkEngine(tokenizer_for_tests), tokenizer_for_tests, InfoEnv, ps, list(range(len(ps))),
                         SamplingParams(n=1, max_new_tokens=4), EpisodeLimits(max_turns=2))
    by = {t.prompt.uid: t for t in trajs}
    assert by["np_false"].episode["infos"] == [{"success": False, "distance": 0.5, "cells": [0, 1, 2], "4": "key"}]
    assert "InfoEnv.step() returned info['tool_errors']=['bad call'] (list); it must be a count" \
        in by["errors_listed"].episode["error"]
    assert "InfoEnv.step() returned info['tool_errors']=None (NoneType)" in by["errors_none"].episode["error"]
    metrics = score_episodes(trajs, 4)
    assert [by[m].correct for m in modes] == [False, True, None, None]
    assert metrics["env/tool_call_errors"] == 2.0 and metrics["env/episode_errors"] == 2.0


def test_an_agent_programs_info_is_checked_as_an_environments():
    """A program returning {"success": "false"} was scored correct (the text reads as true)."""
    assert "info['success']='false' (str); it must be True, False or None" in _outcome({"reward": 1, "success": "false"})
    assert "info['tool_errors']='2' (str)" in _outcome({"reward": 1, "tool_errors": "2"})
    assert _outcome({"reward": 1, "success": False, "tool_errors": 2}) == (1.0, {"success": False, "tool_errors": 2})


class FailingEngine:
    """Samples "hi" for a conversation's first turn; the second fails as ``mode`` says: an error
    completion (a conversation past the model's context window) or an exception."""

    def __init__(self, tokenizer, mode="completion"):
        self.tokenizer, self.mode = tokenizer, mode

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            if self.tokenizer.decode(list(r.prompt_ids)).count("hi") == 0:
                ids = encode_text(self.tokenizer, "hi") + [self.tokenizer.eos_token_id]
                out.append([Completion(ids, [-0.5] * len(ids), "stop", 0)])
            elif self.mode == "raise":
                raise OSError("the engine's device is gone")
            else:
                out.append([Completion([], [], "error", 0, error="prompt has 300 tokens but the context window is 256")])
        return out


def test_a_turn_the_engine_cannot_sample_ends_the_endpoints_episode_saying_why(tokenizer_for_tests):
    """The endpoint answered a bare 500 "Internal Server Error"; the OpenAI client's automatic
    retry then got a 400 saying the request held no new message, and a program that caught the
    error and returned a reward trained on the episode (the agent loop fails it)."""
    from fastapi.testclient import TestClient

    from rlxf.envs.chat_server import create_app

    for mode, status in (("completion", 400), ("raise", 500)):
        recorder = EpisodeRecorder(FailingEngine(tokenizer_for_tests, mode), tokenizer_for_tests)
        client = TestClient(create_app(recorder), raise_server_exceptions=False)
        messages = [{"role": "user", "content": "a"}]
        assert client.post("/v1/chat/completions", json={"user": "e", "messages": messages}).status_code == 200
        messages += [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "b"}]
        r = client.post("/v1/chat/completions", json={"user": "e", "messages": messages})
        why = "context window is 256" if mode == "completion" else "OSError: the engine's device is gone"
        assert r.status_code == status and why in r.json()["error"]["message"]
        retry = client.post("/v1/chat/completions", json={"user": "e", "messages": messages})
        assert retry.status_code == 400 and "has ended in error (engine: " in retry.json()["error"]["message"]
        [t] = recorder.trajectories()
        assert (t.episode["end"], t.finish_reason, any(t.loss_mask)) == ("error", "error", False)
        assert why in t.episode["error"]


def test_a_program_that_swallows_an_engine_failure_does_not_train_on_its_episode(tokenizer_for_tests):
    import httpx

    from rlxf.envs.programs import ProgramEpisodes

    def agent(base_url, task):
        messages = [{"role": "user", "content": "a"}]
        httpx.post(f"{base_url}/chat/completions", json={"messages": messages}, timeout=30)
        messages += [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "b"}]
        httpx.post(f"{base_url}/chat/completions", json={"messages": messages}, timeout=30)   # a 400, ignored
        return 1.0

    programs = ProgramEpisodes(agent, FailingEngine(tokenizer_for_tests), tokenizer_for_tests, EpisodeLimits(),
                               timeout_s=30)
    try:
        [t] = programs.run([Prompt("p", [1], "", "")], [0], SamplingParams(n=1, max_new_tokens=4))
    finally:
        programs.close()
    assert (t.episode["end"], t.reward, any(t.loss_mask)) == ("error", 0.0, False)
    assert "engine: prompt has 300 tokens" in t.episode["error"]

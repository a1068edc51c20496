"""The agent loop and the agent-program endpoint at their limits: ``env.max_total_tokens`` caps
what environments, tools and programs add, not only what the model samples; a first observation
the chat template refuses, an environment that breaks after paying, a few-shot first
observation, a tool that calls ``sys.exit()`` and an agent command that leaves children behind
all stay inside their episode (``agentic_limit_plugins`` holds the environments and programs)."""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import sys
import time

import pytest
from agentic_limit_plugins import (
    DOCUMENT,
    FEW_SHOT,
    EndsWithAssistantEnv,
    ExitingEnv,
    FewShotEnv,
    PaysThenBreaksEnv,
    TwoUsersFirstEnv,
    few_shot_agent,
    long_first_agent,
    paid_then_crashed_agent,
    pasting_agent,
)
from rl_helpers import write_config

from rlxf.config import load_config
from rlxf.data import build_prompt_data
from rlxf.envs.agent import EpisodeLimits, call_all, run_episodes
from rlxf.envs.programs import ProgramEpisodes, command_agent
from rlxf.envs.rollout import score_episodes
from rlxf.envs.tokens import encode_text, render
from rlxf.envs.tools import ToolSet
from rlxf.placement.local import LocalPlacement
from rlxf.rewards.types import ScoredSample
from rlxf.rollout import SamplingParams
from rlxf.types import Completion, Prompt

pytest.importorskip("openai")


class SeededEngine:
    """Answers each request with the last digit of its seed (+ eos): log-prob -0.5, version 2.
    Two paths that seed an episode's turns alike get the same answers."""

    policy_version = 2

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            ids = encode_text(self.tokenizer, str((r.seed or 0) % 10))[: sampling.max_new_tokens - 1]
            ids.append(self.tokenizer.eos_token_id)
            out.append([Completion(ids, [-0.5] * len(ids), "stop", self.policy_version)])
        return out


class AlwaysRight:
    """A verifier pool that calls every answer right (reward 0.25)."""

    def score(self, inputs):
        return [ScoredSample(reward=0.25, scores={"right": 0.25}, correct=True, uid=x.uid) for x in inputs]


@contextlib.contextmanager
def rlxf_warnings():
    """The messages rlxf's logger warns with meanwhile (its own handler: a run may have stopped
    the logger from propagating to the root, where caplog listens)."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger, handler = logging.getLogger("rlxf"), Keep(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


def prompt(uid: str, **metadata) -> Prompt:
    return Prompt(uid=uid, prompt_ids=[1], prompt_text="", metadata=metadata)


def total(t) -> int:
    return len(t.prompt.prompt_ids) + len(t.response_ids)


def test_tool_output_never_grows_an_episode_past_max_total_tokens(tmp_path, nano_model_dir):
    """A tool's long answer would take the episode far past the limit: the episode ends there
    (max_total_tokens) without it, and the sequence that trains is within the limit."""
    path = write_config(tmp_path, nano_model_dir,
                        env={"name": "agentic_limit_plugins:LookupEnv", "tools": ["agentic_limit_plugins:long_text"],
                             "max_turns": 3, "max_total_tokens": 96})
    cfg = load_config(path)
    with LocalPlacement.from_config(cfg) as placement:
        data = build_prompt_data(cfg.data, placement.tokenizer, seed=0)
        trajs = placement.generate(data.train[:2], [1, 2], SamplingParams(n=2, max_new_tokens=6, seed=0))
        placement.score(trajs, 6)
    assert len(trajs) == 4
    for t in trajs:
        ep = t.episode
        assert (ep["end"], ep["error"], ep["turns"]) == ("max_total_tokens", None, 1)
        assert total(t) < 96                               # room for one more model token at most
        assert [m["role"] for m in ep["messages"]] == ["user", "assistant"]
        assert ep["final_observation"][0]["content"] == DOCUMENT   # kept for the record, not appended
        assert t.loss_mask == [1] * len(t.response_ids) and t.reward == 0.5


def test_program_requests_past_max_total_tokens_are_refused_unrecorded(tokenizer_for_tests):
    """Pasting a long document is a 400 that records nothing (the episode ends for the limit and
    trains on what it had), and the episode takes no further request; a first request past the
    limit records nothing at all and fails its episode, as a first observation past it does."""
    tok = tokenizer_for_tests
    programs = {"paste": pasting_agent, "long_first": long_first_agent}
    episodes = ProgramEpisodes(lambda url, task: programs[task.metadata["mode"]](url, task), SeededEngine(tok), tok,
                               EpisodeLimits(max_turns=4, max_total_tokens=64), timeout_s=60)
    try:
        paste, long_first = episodes.run([prompt(m, mode=m) for m in programs], [0, 1],
                                         SamplingParams(n=1, max_new_tokens=4))
    finally:
        episodes.close()
    ep = paste.episode
    assert (ep["end"], ep["error"], ep["turns"]) == ("max_total_tokens", None, 1)
    assert [m["role"] for m in ep["messages"]] == ["user", "assistant"] and total(paste) < 64
    assert paste.reward == 1.0 and paste.loss_mask == [1, 1]
    too_long, after = ep["infos"][0]["refusals"]
    assert "the limit is 64 (env.max_total_tokens)" in too_long
    assert "has ended (env.max_total_tokens)" in after
    assert long_first.episode["end"] == "error" and long_first.response_ids == []
    assert "first request was refused (env.max_total_tokens)" in long_first.episode["error"]
    assert len(long_first.prompt.prompt_ids) < 64 and long_first.reward == 0.0


# ChatML that refuses two messages of one role in a row, as many models' templates do
ALTERNATING_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if loop.index0 > 0 and m.role == messages[loop.index0 - 1].role %}"
    "{{- raise_exception('Conversation roles must alternate') }}{%- endif %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_a_first_observation_the_template_refuses_fails_only_its_episode(tokenizer_for_tests):
    tok = copy.deepcopy(tokenizer_for_tests)
    tok.chat_template = ALTERNATING_TEMPLATE
    trajs = run_episodes(SeededEngine(tok), tok, TwoUsersFirstEnv, [prompt("ok"), prompt("bad", two_users=True)],
                         [0, 1], SamplingParams(n=2, max_new_tokens=4), EpisodeLimits(max_turns=2))
    ok, bad = trajs[:2], trajs[2:]
    for t in ok:
        assert t.episode["end"] == "terminated" and t.reward == 1.0 and any(t.loss_mask)
    for t in bad:
        assert t.episode["end"] == "error" and t.response_ids == [] and t.reward == 0.0
        assert t.episode["error"] == ("reset: the chat template refused the first observation: "
                                      "Conversation roles must alternate")


def test_an_episode_that_breaks_after_paying_gets_nothing(tokenizer_for_tests):
    """What a broken episode paid or said before it broke (reward 1, success True), and what the
    verifiers think of it, is not its outcome: reward 0 and correct None, on both paths."""
    tok = tokenizer_for_tests
    sampling = SamplingParams(n=2, max_new_tokens=4)
    limits = EpisodeLimits(max_turns=3, credit="per_turn")
    broken = run_episodes(SeededEngine(tok), tok, PaysThenBreaksEnv, [prompt("p")], [0], sampling, limits)
    kept = run_episodes(SeededEngine(tok), tok, PaysThenBreaksEnv, [prompt("p")], [0], sampling,
                        EpisodeLimits(max_turns=1, credit="per_turn"))   # ends before the crash
    programs = ProgramEpisodes(paid_then_crashed_agent, SeededEngine(tok), tok, limits, timeout_s=60)
    try:
        crashed = programs.run([prompt("q")], [0], sampling)
    finally:
        programs.close()
    m = score_episodes(broken + kept + crashed, 4, AlwaysRight())
    assert m["env/episode_errors"] == 4
    for t in kept:
        assert t.episode["end"] == "max_turns" and t.reward == 1.25 and t.correct is True
    for t in broken + crashed:
        assert t.episode["end"] == "error" and not any(t.loss_mask)
        assert t.reward == 0.0 and t.correct is None and t.scores["env"] == 0.0
        assert set(t.episode["turn_rewards"]) == {0.0}
    for t in broken:
        assert "environment crashed" in t.episode["error"] and t.episode["turns"] == 2
        assert t.token_rewards == [0.0] * len(t.response_ids)
    assert "agent crashed after its turn" in crashed[0].episode["error"]


def test_a_few_shot_first_observation_is_history(tokenizer_for_tests):
    """A first observation may hold assistant messages before its last one (few-shot): they are
    prompt tokens, and both paths give the same trajectory (model turns count from the first
    sampled one); a first observation ending with the assistant's is still refused."""
    tok = tokenizer_for_tests
    sampling = SamplingParams(n=2, max_new_tokens=4)
    prompts = [prompt("a"), prompt("b")]
    looped = run_episodes(SeededEngine(tok), tok, FewShotEnv, prompts, [3, 4], sampling, EpisodeLimits())
    programs = ProgramEpisodes(few_shot_agent, SeededEngine(tok), tok, EpisodeLimits(), timeout_s=60)
    try:
        served = programs.run(prompts, [3, 4], sampling)
    finally:
        programs.close()
    fresh = encode_text(tok, render(tok, FEW_SHOT, generation_prompt=True))
    for a, b in zip(looped, served, strict=True):
        assert a.episode["error"] is None and b.episode["error"] is None, (a.episode["error"], b.episode["error"])
        assert a.episode["messages"][:4] == FEW_SHOT and a.prompt.prompt_ids == fresh
        assert a.loss_mask == [1] * len(a.response_ids) and a.episode["turns"] == 1
        assert (a.prompt.prompt_ids, a.response_ids, a.loss_mask) == (b.prompt.prompt_ids, b.response_ids, b.loss_mask)
        assert a.rollout_logprobs == b.rollout_logprobs and a.reward == b.reward
        assert a.episode["messages"] == b.episode["messages"]
    assert len({tuple(t.response_ids) for t in looped}) > 1   # answers follow the seeds, so the paths seed alike
    [t] = run_episodes(SeededEngine(tok), tok, EndsWithAssistantEnv, [prompt("c")], [0],
                       SamplingParams(n=1, max_new_tokens=4), EpisodeLimits())
    assert "must end with a user / tool / system turn, not 'assistant'" in t.episode["error"]


def test_sys_exit_in_a_tool_or_a_step_is_reported_as_itself(tokenizer_for_tests):
    tools = ToolSet(["agentic_limit_plugins:exits"])
    used = tools.run('<tool_call>{"name": "exits", "arguments": {"code": 2}}</tool_call>', turn=0)
    assert used.errors == 1 and used.messages[0]["content"] == "error: SystemExit: 2"
    start = time.monotonic()
    (ok, why), second = call_all([lambda: sys.exit(4), lambda: 5], timeout=20)
    assert not ok and why.startswith("SystemExit: 4 (at ") and second == (True, 5)   # and the line that raised
    assert time.monotonic() - start < 10
    tok = tokenizer_for_tests
    [t] = run_episodes(SeededEngine(tok), tok, ExitingEnv, [prompt("x")], [0], SamplingParams(n=1, max_new_tokens=4),
                       EpisodeLimits(step_timeout_s=20))
    assert t.episode["error"].startswith("step 0: SystemExit: 3 (at ")
    assert score_episodes([t], 4)["env/step_timeouts"] == 0
    tools.functions["exits"] = lambda code: (_ for _ in ()).throw(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):   # Ctrl-C still stops the run
        tools.run('<tool_call>{"name": "exits", "arguments": {"code": 2}}</tool_call>', turn=0)


# starts a child (the real work of a wrapper script) that outlives it unless its group is killed
SPAWNING_AGENT = """
import json, os, subprocess, sys, urllib.request
task = json.loads(os.environ["RLXF_TASK"])
mode = task["metadata"]["mode"]
child = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open(os.path.join(task["metadata"]["dir"], mode + ".pid"), "w") as f:
    f.write(str(child.pid))
if mode == "hangs":
    child.wait()
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}]}).encode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body,
                             {"Content-Type": "application/json"})
json.load(urllib.request.urlopen(req))
print(1.0)                      # "leaves": done, its child still running
"""


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not: it waits for a reaper that may never come)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_agent_commands_take_their_children_along(tmp_path, tokenizer_for_tests):
    """A command that times out, or returns leaving a child running, has its whole process group
    killed; each failed program episode is warned about, as a failed environment episode is."""
    script = tmp_path / "agent.py"
    script.write_text(SPAWNING_AGENT)
    tok = tokenizer_for_tests
    programs = ProgramEpisodes(command_agent([sys.executable, str(script)], timeout_s=3), SeededEngine(tok), tok,
                               EpisodeLimits(), timeout_s=3)
    pids: dict[str, int] = {}
    try:
        with rlxf_warnings() as warned:
            hangs, leaves = programs.run([prompt(m, mode=m, dir=str(tmp_path)) for m in ("hangs", "leaves")],
                                         [0, 1], SamplingParams(n=1, max_new_tokens=4))
        programs.close()
        pids = {m: int((tmp_path / f"{m}.pid").read_text()) for m in ("hangs", "leaves")}
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(p) for p in pids.values()), {m: alive(p) for m, p in pids.items()}
    finally:
        for pid in pids.values():   # the test's own children, should a failure have left them
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert leaves.episode["error"] is None and leaves.reward == 1.0
    assert "did not return within 3 s (env.agent_timeout_s)" in hangs.episode["error"]
    assert [w for w in warned if "failed" in w] == [f"episode hangs (group 0) failed: {hangs.episode['error']}"]


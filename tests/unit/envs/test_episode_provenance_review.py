"""Review: each model token of a multi-turn episode keeps the version that sampled it (weights
that change between turns, or within one), on both the agent loop's and the chat endpoint's
path; each step reports how its episodes ended; and the chat endpoint returns as tool calls only
the blocks a tool environment would run; every environment made is closed."""

from __future__ import annotations

from rlxf.config.env import EnvConfig
from rlxf.envs.agent import EpisodeLimits, run_episodes, turn_metrics
from rlxf.envs.base import StepResult, build_env
from rlxf.envs.chat_protocol import tool_calls
from rlxf.envs.chat_server import EpisodeRecorder
from rlxf.envs.rollout import EnvRollout
from rlxf.envs.tokens import encode_text
from rlxf.envs.tools import ToolSet
from rlxf.rollout import SamplingParams
from rlxf.trainer.collect import batch_metrics_of
from rlxf.types import Completion, Prompt


class SwappingEngine:
    """Answers "I guess 1" + eos; the weights move on one version per call, and the second call's
    turn is a partial rollout: its first two tokens come from version 2, the rest from version 3
    (which the third call samples with)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, 0

    def generate(self, requests, sampling):
        self.calls += 1
        ids = encode_text(self.tokenizer, "I guess 1") + [self.tokenizer.eos_token_id]
        versions = [2, 2] + [3] * (len(ids) - 2) if self.calls == 2 else None
        return [[Completion(list(ids), [-0.5] * len(ids), "stop", self.calls, token_versions=versions)]
                for _ in requests]


def model_runs(values, mask):
    """``values`` where mask is 1, one list per run of ones (one per model turn)."""
    runs, run = [], []
    for v, m in zip(values, mask):
        if m:
            run.append(v)
        elif run:
            runs.append(run)
            run = []
    return runs + ([run] if run else [])


def test_each_turns_tokens_keep_the_version_that_sampled_them(tokenizer_for_tests):
    tok = tokenizer_for_tests
    width = len(encode_text(tok, "I guess 1")) + 1
    [t] = run_episodes(SwappingEngine(tok), tok, lambda: build_env("guess_number", {}),
                       [Prompt("g", [1], "", "9")], [0], SamplingParams(n=1, max_new_tokens=16),
                       EpisodeLimits(max_turns=3))
    assert t.episode["end"] == "max_turns"
    # turn 1 under version 1, turn 2 switched from 2 to 3 while decoding, turn 3 under version 3
    assert model_runs(t.policy_versions, t.loss_mask) == [[1] * width, [2, 2] + [3] * (width - 2), [3] * width]
    # the environment's tokens carry no version (-1): the oldest model token is what a staleness bound reads
    assert {v for v, m in zip(t.policy_versions, t.loss_mask) if not m} == {-1}
    assert min(v for v, m in zip(t.policy_versions, t.loss_mask) if m) == 1


def test_chat_endpoint_turns_keep_the_version_that_sampled_them(tokenizer_for_tests):
    tok = tokenizer_for_tests
    width = len(encode_text(tok, "I guess 1")) + 1
    recorder = EpisodeRecorder(SwappingEngine(tok), tok)
    messages = [{"role": "user", "content": "Guess my number."}]
    for hint in ("higher", "higher"):
        reply = recorder.complete("e", messages)
        messages += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": hint}]
    [t] = recorder.trajectories()
    assert model_runs(t.policy_versions, t.loss_mask) == [[1] * width, [2, 2] + [3] * (width - 2)]


class EndsEnv:
    """Ends its episode the way the prompt's ground truth says."""

    def reset(self, task):
        self.how = task.ground_truth
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        if self.how == "raises":
            raise RuntimeError("broken")
        if self.how == "floods":      # an observation far past env.max_total_tokens
            return StepResult([{"role": "user", "content": "word " * 200}])
        return StepResult([{"role": "user", "content": "again"}], terminated=self.how == "terminated",
                          truncated=self.how == "truncated")


def test_every_step_reports_how_its_episodes_ended(tokenizer_for_tests):
    tok = tokenizer_for_tests
    engine = SwappingEngine(tok)
    hows = ["terminated", "terminated", "truncated", "forever", "floods", "raises", "forever", "terminated"]
    trajs = run_episodes(engine, tok, EndsEnv, [Prompt(f"p{i}", [1], "", h) for i, h in enumerate(hows)],
                         list(range(len(hows))), SamplingParams(n=1, max_new_tokens=16),
                         EpisodeLimits(max_turns=2, max_total_tokens=120))
    assert [t.episode["end"] for t in trajs] == ["terminated", "terminated", "truncated", "max_turns",
                                                 "max_total_tokens", "error", "max_turns", "terminated"]
    shares = {"env/end/terminated": 3 / 8, "env/end/truncated": 1 / 8, "env/end/max_turns": 2 / 8,
              "env/end/max_total_tokens": 1 / 8, "env/end/error": 1 / 8}
    assert {k: v for k, v in turn_metrics(trajs).items() if k.startswith("env/end/")} == shares
    # what collect logs for a step (metrics.jsonl): every share, the absent ends at 0
    logged = batch_metrics_of(trajs[:2])
    assert logged["env/end/terminated"] == 1.0 and logged["env/end/error"] == logged["env/end/max_turns"] == 0.0


def test_the_endpoint_returns_only_the_calls_a_tool_environment_would_run():
    """Malformed blocks were returned as tool_calls: a name of 5 or null became "5" / "None", and
    arguments that are no object a JSON string an OpenAI client cannot call a function with."""
    good = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    text = ('<tool_call>{"name": "calculator", "arguments": "2+2"}</tool_call>'
            '<tool_call>{"name": 5}</tool_call><tool_call>{"name": null, "arguments": {}}</tool_call>'
            '<tool_call>[1]</tool_call><tool_call>' + "[" * 5000 + '</tool_call>' + good)
    assert tool_calls(text, 2) == [{"id": "call_2_5", "type": "function",
                                    "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'}}]
    used = ToolSet(["calculator"]).run(text, turn=2)
    assert [m["content"] for m in used.messages][-2:] == ["error: the call's JSON is nested too deeply to parse", "4"]
    assert used.errors == 5 and [m["tool_call_id"] for m in used.messages if not m["content"].startswith("error")] \
        == ["call_2_5"]


def test_environments_made_are_closed_when_their_reset_fails_and_after_the_config_probe(tokenizer_for_tests):
    """An environment whose reset raised, and the one EnvRollout makes to check env.name and
    env.options, were never closed: what their constructors started stayed until exit."""
    import env_plugins

    EnvRollout(EnvConfig(name="env_plugins:HoldingEnv"), None, tokenizer_for_tests)
    assert env_plugins.OPEN == []
    trajs = run_episodes(SwappingEngine(tokenizer_for_tests), tokenizer_for_tests, env_plugins.HoldingEnv,
                         [Prompt("a", [1], "", "ok"), Prompt("b", [1], "", "bad")], [0, 1],
                         SamplingParams(n=2, max_new_tokens=16), EpisodeLimits())
    assert [t.episode["end"] for t in trajs] == ["terminated", "terminated", "error", "error"]
    assert env_plugins.OPEN == []


def test_an_observation_far_past_the_token_limit_is_refused_before_it_is_tokenized(tokenizer_for_tests,
                                                                                    monkeypatch):
    """Megabytes of tool output were tokenized (twice, in the loop's own thread, seconds per
    episode) only to be refused for env.max_total_tokens; a model printing a lot stalled every step."""
    import rlxf.envs.tokens as tokens

    tokenized: list[int] = []
    encode = tokens.encode_text
    monkeypatch.setattr(tokens, "encode_text", lambda tok, text: tokenized.append(len(text)) or encode(tok, text))

    class Flood:
        def reset(self, task):
            return [{"role": "user", "content": "go"}]

        def step(self, action):
            return StepResult([{"role": "tool", "content": "ab cd " * 200_000}])

    [t] = run_episodes(SwappingEngine(tokenizer_for_tests), tokenizer_for_tests, Flood, [Prompt("f", [1], "", "")],
                       [0], SamplingParams(n=1, max_new_tokens=16), EpisodeLimits(max_turns=3, max_total_tokens=200))
    assert t.episode["end"] == "max_total_tokens" and t.episode["turns"] == 1
    assert max(tokenized) < 1000   # the first observation's template text only

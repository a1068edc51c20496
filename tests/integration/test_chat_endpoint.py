"""The OpenAI-compatible endpoint on the nano model: an agent program driving a seeded episode
through HTTP gets the same trajectory as the built-in agent loop; tool calls come back as
OpenAI tool_calls; a rewritten history is a clear 400."""

from __future__ import annotations

import httpx
import pytest
import torch

from rlxf.envs.agent import EpisodeLimits, run_episodes
from rlxf.envs.base import EnvTask, build_env
from rlxf.envs.chat_server import EpisodeRecorder, serving
from rlxf.models import load_model
from rlxf.models.loading import load_tokenizer
from rlxf.rollout import SamplingParams, build_engine
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt

TURNS, MAX_NEW = 3, 6


@pytest.fixture(scope="module")
def engine_and_tokenizer(nano_model_dir):
    tok = load_tokenizer(nano_model_dir)
    return build_engine("native", load_model(nano_model_dir), tok, seed=0), tok


def agent_program(url: str, episode: str, task: EnvTask) -> float:
    """A guess-the-number agent that knows only the OpenAI chat API (and the environment)."""
    env = build_env("guess_number", {"low": 1, "high": 8})
    messages = env.reset(task)
    total = 0.0
    with httpx.Client(base_url=url, timeout=60) as client:
        for turn in range(TURNS):
            r = client.post("/chat/completions", json={
                "model": "rlxf-policy", "messages": messages, "user": episode, "temperature": 1.0,
                "max_tokens": MAX_NEW, "seed": derive_seed(task.seed, turn)})
            r.raise_for_status()
            reply = r.json()["choices"][0]["message"]
            messages.append({"role": "assistant", "content": reply["content"]})
            result = env.step(reply["content"])
            total += result.reward
            if result.terminated or turn == TURNS - 1:
                break
            messages += result.observation
        client.post("/rlxf/reward", json={"episode": episode, "reward": total}).raise_for_status()
    return total


def test_endpoint_gives_the_built_in_loops_trajectory(engine_and_tokenizer):
    engine, tok = engine_and_tokenizer
    prompt = Prompt(uid="guess:0", prompt_ids=[1], prompt_text="", ground_truth="6")
    seed = 11
    [builtin] = run_episodes(engine, tok, lambda: build_env("guess_number", {"low": 1, "high": 8}), [prompt], [seed],
                             SamplingParams(n=1, temperature=1.0, max_new_tokens=MAX_NEW),
                             EpisodeLimits(max_turns=TURNS, max_total_tokens=1024))
    recorder = EpisodeRecorder(engine, tok)
    task = EnvTask(uid=prompt.uid, prompt="", ground_truth="6", seed=derive_seed(seed, 0))
    with serving(recorder) as url:
        reward = agent_program(url, "ep-0", task)
    [served] = recorder.trajectories({"ep-0": prompt})
    assert builtin.episode["turns"] >= 2            # a multi-turn episode, or the comparison says little
    assert served.prompt.prompt_ids == builtin.prompt.prompt_ids
    assert served.response_ids == builtin.response_ids
    assert served.loss_mask == builtin.loss_mask and served.policy_versions == builtin.policy_versions
    torch.testing.assert_close(torch.tensor(served.rollout_logprobs), torch.tensor(builtin.rollout_logprobs))
    assert served.reward == reward == builtin.reward
    assert served.episode["messages"] == builtin.episode["messages"]


def test_tool_calls_and_history_errors(tokenizer_for_tests):
    from rlxf.envs.tokens import encode_text
    from rlxf.types import Completion

    class Caller:
        policy_version = 2

        def generate(self, requests, sampling):
            text = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
            ids = encode_text(tokenizer_for_tests, text) + [tokenizer_for_tests.eos_token_id]
            return [[Completion(ids, [-0.5] * len(ids), "stop", 2)] for _ in requests]

    recorder = EpisodeRecorder(Caller(), tokenizer_for_tests)
    first = [{"role": "user", "content": "What is 2+2?"}]
    with serving(recorder) as url, httpx.Client(base_url=url, timeout=60) as client:
        r = client.post("/chat/completions", json={"messages": first, "user": "t"}).json()
        choice = r["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        [call] = choice["message"]["tool_calls"]
        assert call["function"] == {"name": "calculator", "arguments": '{"expression": "2+2"}'}
        # an OpenAI client resends the assistant turn as tool_calls with no content, then the tool's answer
        history = first + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": call["id"], "content": "4"}]
        r = client.post("/chat/completions", json={"messages": history, "user": "t"})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] > 0
        bad = [{"role": "user", "content": "What is 3+3?"}] + history[1:] + [
            {"role": "assistant", "content": None}, {"role": "user", "content": "?"}]
        r = client.post("/chat/completions", json={"messages": bad, "user": "t"})
        assert r.status_code == 400 and "message 0 differs" in r.json()["error"]["message"]
        # the tool message's id is part of what the template sees, so it may not change either
        renamed = history[:2] + [{**history[2], "tool_call_id": "call_9_9"}, {"role": "assistant", "content": None},
                                 {"role": "user", "content": "?"}]
        r = client.post("/chat/completions", json={"messages": renamed, "user": "t"})
        assert r.status_code == 400 and "message 2 differs" in r.json()["error"]["message"]
        assert "tool_call_id='call_9_9'" in r.json()["error"]["message"]
        assert client.post("/rlxf/reward", json={"episode": "nope", "reward": 1}).status_code == 404
    [t] = recorder.trajectories()
    assert [m["role"] for m in t.episode["messages"]] == ["user", "assistant", "tool", "assistant"]
    turn = len(encode_text(tokenizer_for_tests, '<tool_call>{"name": "calculator", "arguments": '
                                                '{"expression": "2+2"}}</tool_call>')) + 1
    assert sum(t.loss_mask) == 2 * turn and 0 < t.loss_mask.index(0) == turn
    assert {v for v, m in zip(t.policy_versions, t.loss_mask) if m} == {2}

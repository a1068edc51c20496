"""Agent programs drive rollouts (``env.agent`` / ``env.agent_command``): the official OpenAI client
through rlxf's endpoint gives the built-in loop's trajectories, runs a tool-using episode, trains
with `rlxf train`; programs that raise, hang, return garbage or exit nonzero end only their episode."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest
import torch
from rl_helpers import metrics, write_config
from safetensors.torch import load_file

pytest.importorskip("openai")

from rlxf.cli.main import main  # noqa: E402
from rlxf.config.env import EnvConfig  # noqa: E402
from rlxf.envs.agent import EpisodeLimits  # noqa: E402
from rlxf.envs.programs import ProgramEpisodes, command_agent  # noqa: E402
from rlxf.envs.rollout import EnvRollout, score_episodes  # noqa: E402
from rlxf.envs.tokens import encode_text  # noqa: E402
from rlxf.envs.tools import calculator  # noqa: E402
from rlxf.models import load_model  # noqa: E402
from rlxf.models.loading import load_tokenizer  # noqa: E402
from rlxf.rollout import SamplingParams, build_engine  # noqa: E402
from rlxf.types import Completion, Prompt  # noqa: E402


def test_openai_client_episodes_equal_the_built_in_loops(nano_model_dir):
    """Same prompts and seeds: the program path (OpenAI client -> endpoint) and the environment
    path (agent loop) give the same ids, masks, log-probs, versions and rewards, episode by episode."""
    tok = load_tokenizer(nano_model_dir)
    engine = build_engine("native", load_model(nano_model_dir), tok, seed=0)
    prompts = [Prompt(uid=f"guess:{i}", prompt_ids=[1], prompt_text="", ground_truth=str(s))
               for i, s in enumerate((6, 3))]
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=6)
    common = {"max_turns": 3, "max_total_tokens": 256}
    builtin = EnvRollout(EnvConfig(name="guess_number", options={"low": 1, "high": 8}, **common), engine, tok)
    served = EnvRollout(EnvConfig(agent="agentic_plugins:guess_agent", **common), engine, tok)
    try:
        a = builtin.generate(prompts, [11, 12], sampling, first_group=5)
        b = served.generate(prompts, [11, 12], sampling, first_group=5)
    finally:
        served.close()
    score_episodes(a, 6), score_episodes(b, 6)
    assert max(t.episode["turns"] for t in a) >= 2          # multi-turn, or the comparison says little
    for x, y in zip(a, b, strict=True):
        assert y.episode["error"] is None, y.episode["error"]
        assert (x.group, x.prompt.prompt_ids, x.response_ids) == (y.group, y.prompt.prompt_ids, y.response_ids)
        assert x.loss_mask == y.loss_mask and x.policy_versions == y.policy_versions
        torch.testing.assert_close(torch.tensor(x.rollout_logprobs), torch.tensor(y.rollout_logprobs))
        assert x.reward == y.reward and x.correct == y.correct
        assert x.episode["messages"] == y.episode["messages"]


class ToolCaller:
    """Turn 0 calls the calculator on the user's expression, turn 1 answers with its value,
    whatever the seed and the chat template (both paths then sample the same turns)."""

    policy_version = 4

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            text = self.tokenizer.decode(list(r.prompt_ids))
            expr = text.split("<|im_start|>user\n")[1].split("=")[0]
            if text.count("<|im_start|>assistant") == 1:
                call = json.dumps({"name": "calculator", "arguments": {"expression": expr}})
                reply = f"<tool_call>{call}</tool_call>"
            else:
                reply = f"It is {calculator(expr)}"
            ids = encode_text(self.tokenizer, reply)[: sampling.max_new_tokens - 1] + [self.tokenizer.eos_token_id]
            out.append([Completion(ids, [-0.5] * len(ids), "stop", self.policy_version)])
        return out


def tool_agent(base_url, task):
    """A tool-using agent as OpenAI's docs write one: `tools=`, then answer each tool_call."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    schema = {"type": "function", "function": {"name": "calculator", "parameters": {
        "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
    messages = [{"role": "system", "content": "Use the calculator."}, {"role": "user", "content": task.prompt}]
    for _ in range(4):
        reply = client.chat.completions.create(model="rlxf-policy", messages=messages, tools=[schema])
        choice = reply.choices[0]
        messages.append(choice.message.model_dump(exclude_none=True))
        if choice.finish_reason != "tool_calls":
            return float(choice.message.content.endswith(str(task.ground_truth)))
        for call in choice.message.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculator(**args)})
    return 0.0


def test_openai_client_runs_a_multi_turn_tool_episode(tokenizer_for_tests):
    tok = tokenizer_for_tests
    programs = ProgramEpisodes(tool_agent, ToolCaller(tok), tok, EpisodeLimits(max_turns=4, max_total_tokens=512),
                               timeout_s=60)
    prompt = Prompt(uid="a:0", prompt_ids=[1], prompt_text="", ground_truth="56088",
                    metadata={"question": "123*456="})
    try:
        [t] = programs.run([prompt], [0], SamplingParams(n=1, max_new_tokens=64))
    finally:
        programs.close()
    ep = t.episode
    assert ep["error"] is None and t.reward == 1.0 and ep["turns"] == 2
    assert [m["role"] for m in ep["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert ep["messages"][3]["content"] == "56088" and ep["messages"][4]["content"] == "It is 56088"
    runs = [(a, m) for a, m in enumerate(t.loss_mask) if a == 0 or t.loss_mask[a - 1] != m]
    assert [m for _, m in runs] == [1, 0, 1]                      # model, tool message, model
    tool_part = tok.decode(t.response_ids[runs[1][0]:runs[2][0]])
    assert "<|im_start|>tool\n56088<|im_end|>" in tool_part        # the tool's answer, mask 0
    assert {v for v, m in zip(t.policy_versions, t.loss_mask) if m} == {4}


class Echo:
    """Answers every turn with "7" (+ eos), version 1."""

    policy_version = 1

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, requests, sampling):
        ids = encode_text(self.tokenizer, "7") + [self.tokenizer.eos_token_id]
        return [[Completion(ids, [-0.1] * len(ids), "stop", 1)] for _ in requests]


RELEASE = threading.Event()


def flaky_agent(base_url, task):
    from openai import OpenAI

    mode = task.metadata["mode"]
    if mode == "silent":
        return 1.0                                  # never asked the model anything
    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    messages = [{"role": "user", "content": "go"}]
    while True:                                     # "endless" runs until the endpoint refuses (max_turns)
        text = client.chat.completions.create(model="m", messages=messages).choices[0].message.content
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "again"}]
        if mode == "raises":
            raise RuntimeError("agent crashed")
        if mode == "hangs":
            RELEASE.wait(30)
        if mode == "garbage":
            return "seven"
        if mode == "ok":
            return {"reward": 0.5, "success": False, "note": "fine"}


def test_failing_programs_end_only_their_episode(tokenizer_for_tests):
    tok = tokenizer_for_tests
    modes = ["ok", "raises", "hangs", "garbage", "silent", "endless"]
    prompts = [Prompt(uid=m, prompt_ids=[1], prompt_text="", metadata={"mode": m}) for m in modes]
    programs = ProgramEpisodes(flaky_agent, Echo(tok), tok, EpisodeLimits(max_turns=3, max_total_tokens=256),
                               timeout_s=3)
    try:
        trajs = programs.run(prompts, list(range(len(modes))), SamplingParams(n=1, max_new_tokens=4))
        RELEASE.set()          # the abandoned "hangs" program wakes up and asks again: refused, nothing recorded
        time.sleep(0.5)
        assert programs.recorder.episodes == {}
    finally:
        RELEASE.set()
        programs.close()
    m = score_episodes(trajs, 4)
    by = {t.prompt.uid: t for t in trajs}
    assert by["ok"].reward == 0.5 and by["ok"].episode["infos"] == [{"success": False, "note": "fine"}]
    assert by["ok"].correct is False and sum(by["ok"].loss_mask) == 2
    endless = by["endless"]                          # refused at max_turns: ended by the limit, still trained
    assert endless.episode["end"] == "max_turns" and endless.episode["error"] is None
    assert endless.episode["turns"] == 3 and sum(endless.loss_mask) == 6 and endless.reward == 0.0
    errors = {u: by[u].episode["error"] for u in ("raises", "hangs", "garbage", "silent")}
    assert "RuntimeError: agent crashed" in errors["raises"]
    assert "did not return within 3 s (env.agent_timeout_s)" in errors["hangs"]
    assert "returned 'seven'" in errors["garbage"]
    assert "made no model call" in errors["silent"]
    for u in errors:
        assert by[u].finish_reason == "error" and not any(by[u].loss_mask) and by[u].reward == 0.0
    assert m["env/episode_errors"] == 4 and m["env/step_timeouts"] == 1


class SlowEcho(Echo):
    """Echo taking 0.2 s per engine call, recording each call's batch size."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self.batches = []

    def generate(self, requests, sampling):
        import time

        self.batches.append(len(requests))
        time.sleep(0.2)
        return super().generate(requests, sampling)


def test_concurrent_episodes_share_engine_calls(tokenizer_for_tests):
    tok = tokenizer_for_tests
    engine = SlowEcho(tok)
    programs = ProgramEpisodes(flaky_agent, engine, tok, EpisodeLimits(max_turns=3, max_total_tokens=256),
                               timeout_s=60)
    prompts = [Prompt(uid=f"e{i}", prompt_ids=[1], prompt_text="", metadata={"mode": "endless"}) for i in range(4)]
    try:
        trajs = programs.run(prompts, [0, 1, 2, 3], SamplingParams(n=2, max_new_tokens=4))
    finally:
        programs.close()
    assert all(t.episode["turns"] == 3 and t.episode["error"] is None for t in trajs)
    assert sum(engine.batches) == 8 * 3 and len(engine.batches) < 8 * 3 and max(engine.batches) > 1


AGENT_SCRIPT = """
import json, os, sys, urllib.request
task = json.loads(os.environ["RLXF_TASK"])
if task["metadata"]["mode"] == "fail":
    sys.exit("no luck")
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": task["prompt"]}]}).encode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body,
                             {"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
reply = json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"]
print("log line")
print(json.dumps({"reward": float(reply == "7"), "success": reply == "7"}))
"""


def test_agent_command_runs_once_per_episode(tmp_path, tokenizer_for_tests):
    script = tmp_path / "agent.py"
    script.write_text(AGENT_SCRIPT)
    tok = tokenizer_for_tests
    agent = command_agent([sys.executable, str(script)], timeout_s=60)
    programs = ProgramEpisodes(agent, Echo(tok), tok, EpisodeLimits(max_total_tokens=256), timeout_s=60)
    prompts = [Prompt(uid=m, prompt_ids=[1], prompt_text="", metadata={"mode": m, "question": "say 7"})
               for m in ("ok", "fail")]
    try:
        ok, fail = programs.run(prompts, [0, 1], SamplingParams(n=1, max_new_tokens=4))
    finally:
        programs.close()
    assert ok.reward == 1.0 and ok.episode["messages"][0] == {"role": "user", "content": "say 7"}
    assert ok.loss_mask == [1, 1] and ok.episode["error"] is None
    assert fail.episode["end"] == "error" and "exited with 1: no luck" in fail.episode["error"]


def test_rlxf_train_with_an_agent_program(tmp_path, nano_model_dir):
    path = write_config(tmp_path, nano_model_dir,
                        env={"agent": "agentic_plugins:digits_agent", "max_turns": 2, "max_total_tokens": 96},
                        rollout={"n": 4, "max_new_tokens": 6},
                        train={"steps": 2, "prompts_per_step": 2, "micro_batch_size": 8, "optim": {"lr": 1e-2}},
                        checkpoint={"every": 2}, logging={"samples_fraction": 1.0})
    assert main(["train", str(path)]) == 0
    run = tmp_path / "runs" / "t"
    m = metrics(run)
    assert len(m) == 2 and all(x["env/episode_errors"] == 0 and x["env/turns_mean"] == 2 for x in m)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 16 and all(s["episode"]["turns"] == 2 for s in samples)
    trained = load_file(run / "checkpoints" / "step_2" / "model" / "model.safetensors")
    base = load_file(nano_model_dir / "model.safetensors")
    assert any(not torch.equal(trained[k], base[k]) for k in trained)


def test_tool_episodes_render_names_and_ids_alike_on_both_paths(tool_template_tokenizer):
    """Under a template that renders a tool message's name and call id (and refuses one without):
    the built-in tool environment and an OpenAI-client program (which sends only the call's id)
    give the same trajectory, the tool's name and id in its ids."""
    tok = tool_template_tokenizer
    engine = ToolCaller(tok)
    prompts = [Prompt(uid="a:0", prompt_ids=[1], prompt_text="", ground_truth="56088",
                      metadata={"expression": "123*456"})]
    common = {"max_turns": 3, "max_total_tokens": 1024}
    builtin = EnvRollout(EnvConfig(name="tool_arithmetic", tools=["calculator"], **common), engine, tok)
    served = EnvRollout(EnvConfig(agent="agentic_plugins:calculator_agent", **common), engine, tok)
    try:
        [a] = builtin.generate(prompts, [5], SamplingParams(n=1, max_new_tokens=64))
        [b] = served.generate(prompts, [5], SamplingParams(n=1, max_new_tokens=64))
    finally:
        served.close()
    assert a.episode["error"] is None and b.episode["error"] is None, (a.episode["error"], b.episode["error"])
    assert a.episode["messages"][3] == {"role": "tool", "tool_call_id": "call_0_0", "name": "calculator",
                                        "content": "56088"}
    assert '{"name": "calculator", "id": "call_0_0", "content": "56088"}' in tok.decode(a.response_ids)
    assert (a.prompt.prompt_ids, a.response_ids, a.loss_mask) == (b.prompt.prompt_ids, b.response_ids, b.loss_mask)
    assert a.episode["messages"] == b.episode["messages"] and a.reward == b.reward == 1.0

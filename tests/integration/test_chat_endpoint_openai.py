"""What agent programs send through the official OpenAI client: `tools` reach the first templating
(and may not change within an episode), `stream: true` gives chunks the client parses and records
the same trajectory as a plain request, and requests rlxf cannot record as asked are clear 400s."""

from __future__ import annotations

import copy

import pytest
import torch

openai = pytest.importorskip("openai")

from rlxf.envs.agent import EpisodeLimits  # noqa: E402
from rlxf.envs.base import EnvTask, build_env  # noqa: E402
from rlxf.envs.chat_server import EpisodeRecorder, serving  # noqa: E402
from rlxf.envs.programs import ProgramEpisodes  # noqa: E402
from rlxf.envs.tokens import Conversation, encode_text, render  # noqa: E402
from rlxf.envs.tools import ToolSet  # noqa: E402
from rlxf.models import load_model  # noqa: E402
from rlxf.models.loading import load_tokenizer  # noqa: E402
from rlxf.models.tokenizer import CHATML_TEMPLATE  # noqa: E402
from rlxf.rollout import SamplingParams, build_engine  # noqa: E402
from rlxf.types import Completion, Prompt  # noqa: E402

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
CALCULATOR = ToolSet(["calculator"]).schemas[0]          # the schema the built-in tool environment shows
PYTHON = {"type": "function", "function": {"name": "python", "parameters": {"type": "object", "properties": {}}}}
TOOLS_TEMPLATE = ("{%- if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t['function'] | tojson }}\n"
                  "{% endfor %}<|im_end|>\n{% endif %}" + CHATML_TEMPLATE)


class Scripted:
    """Answers request k with ``replies[k]`` (the last one from then on) + eos, log-prob -0.25 a
    token, version 3; keeps the prompts it was given."""

    policy_version = 3

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.prompts = tokenizer, replies, []

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            self.prompts.append(list(r.prompt_ids))
            text = self.replies[min(len(self.prompts), len(self.replies)) - 1]
            ids = encode_text(self.tokenizer, text) + [self.tokenizer.eos_token_id]
            out.append([Completion(ids, [-0.25] * len(ids), "stop", self.policy_version)])
        return out


def client_for(url):
    return openai.OpenAI(base_url=url, api_key="rlxf", max_retries=0)


def test_tools_reach_a_template_that_renders_them_and_may_not_change(tokenizer_for_tests):
    tok = copy.deepcopy(tokenizer_for_tests)
    tok.chat_template = TOOLS_TEMPLATE
    engine = Scripted(tok, [CALL, "It is 4."])
    recorder = EpisodeRecorder(engine, tok)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    with serving(recorder) as url:
        client = client_for(url)
        reply = client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR], user="t",
                                               tool_choice="auto", parallel_tool_calls=False, store=False,
                                               metadata={"run": "x"})
        assert engine.prompts[0] == encode_text(tok, render(tok, messages, generation_prompt=True, tools=[CALCULATOR]))
        message = reply.choices[0].message
        [call] = message.tool_calls
        assert reply.choices[0].finish_reason == "tool_calls" and call.function.name == "calculator"
        messages += [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "4"}]
        for tools, change in (([CALCULATOR, PYTHON], "added 'python'"), (None, "removed 'calculator'"),
                              ([{**CALCULATOR, "function": {**CALCULATOR["function"], "description": "x"}}],
                               "changed 'calculator'")):
            with pytest.raises(openai.BadRequestError, match=f"tools differ .*{change}"):
                client.chat.completions.create(model="m", messages=messages, user="t",
                                               **({"tools": tools} if tools else {}))
        reply = client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR], user="t")
        assert reply.choices[0].message.content == "It is 4." and reply.choices[0].finish_reason == "stop"
    [t] = recorder.trajectories()
    assert t.episode["tools"] == [CALCULATOR] and t.episode["turns"] == 2
    fresh = render(tok, t.episode["messages"], generation_prompt=False, tools=[CALCULATOR])
    assert t.prompt.prompt_ids + t.response_ids == encode_text(tok, fresh)[:-1]   # all but the closing newline


def test_tools_for_a_template_that_ignores_them_are_the_built_in_environments_block(tokenizer_for_tests):
    """The ChatML template ignores `tools`: the model sees them as the `tool_arithmetic` environment shows
    them, so the program's first prompt is that environment's, token for token."""
    tok = tokenizer_for_tests
    engine = Scripted(tok, ["4"])
    recorder = EpisodeRecorder(engine, tok)
    with serving(recorder) as url:
        client_for(url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2+2="}], tools=[CALCULATOR], user="t")
    env = build_env("tool_arithmetic", {"tools": ToolSet(["calculator"])})
    first = env.reset(EnvTask(uid="a", prompt="", ground_truth="4", metadata={"expression": "2+2"}))
    assert engine.prompts[0] == Conversation.start(tok, first).ids
    assert recorder.episodes["t"].tools_in_system


def test_stream_chunks_parse_with_tool_calls_and_usage(tokenizer_for_tests):
    tok = tokenizer_for_tests
    recorder = EpisodeRecorder(Scripted(tok, [CALL]), tok)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    with serving(recorder) as url:
        client = client_for(url)
        chunks = list(client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR], user="a",
                                                     stream=True, stream_options={"include_usage": True}))
        with client.chat.completions.stream(model="m", messages=messages, tools=[CALCULATOR], user="b") as stream:
            final = stream.get_final_completion()
        none = client.chat.completions.create(model="m", messages=messages, user="c", stream=True,
                                              tool_choice="none")
        none = list(none)
    assert [c.object for c in chunks] == ["chat.completion.chunk"] * len(chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CALL
    [delta] = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert delta[0].index == 0 and delta[0].function.name == "calculator"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == len(encode_text(tok, CALL)) + 1
    assert usage.usage.prompt_tokens == len(recorder.episodes["a"].ids) - usage.usage.completion_tokens
    [call] = final.choices[0].message.tool_calls                 # the client's accumulation of the deltas
    assert call.function.arguments == '{"expression": "2+2"}' and final.choices[0].finish_reason == "tool_calls"
    assert final.usage is None                                    # no usage chunk unless asked
    assert [c.choices[0].finish_reason for c in none if c.choices[0].finish_reason] == ["stop"]   # not parsed


def stream_guess_agent(base_url: str, task: EnvTask) -> dict:
    """`agentic_plugins.guess_agent` over `stream=True`, reading the text from the chunks."""
    env = build_env("guess_number", {"low": 1, "high": 8})
    messages = env.reset(task)
    client = client_for(base_url)
    total = 0.0
    for _ in range(3):
        chunks = list(client.chat.completions.create(model="m", messages=messages, max_tokens=6, stream=True,
                                                     stream_options={"include_usage": True}))
        assert chunks[-1].usage is not None and chunks[-1].choices == []
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        messages.append({"role": "assistant", "content": text})
        result = env.step(text)
        total += result.reward
        if result.terminated:
            return {"reward": total}
        messages += result.observation
    return {"reward": total}


def test_a_streamed_episode_records_the_same_trajectory(nano_model_dir):
    tok = load_tokenizer(nano_model_dir)
    engine = build_engine("native", load_model(nano_model_dir), tok, seed=0)
    prompts = [Prompt(uid=f"guess:{i}", prompt_ids=[1], prompt_text="", ground_truth=str(s))
               for i, s in enumerate((6, 3))]
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=6)
    from agentic_plugins import guess_agent

    runs = []
    for agent in (guess_agent, stream_guess_agent):
        programs = ProgramEpisodes(agent, engine, tok, EpisodeLimits(max_turns=3, max_total_tokens=256), timeout_s=60)
        try:
            runs.append(programs.run(prompts, [11, 12], sampling))
        finally:
            programs.close()
    plain, streamed = runs
    assert max(t.episode["turns"] for t in plain) >= 2
    for x, y in zip(plain, streamed, strict=True):
        assert x.episode["error"] is None and y.episode["error"] is None, (x.episode["error"], y.episode["error"])
        assert (x.prompt.prompt_ids, x.response_ids, x.loss_mask) == (y.prompt.prompt_ids, y.response_ids, y.loss_mask)
        assert x.policy_versions == y.policy_versions and x.reward == y.reward
        torch.testing.assert_close(torch.tensor(x.rollout_logprobs), torch.tensor(y.rollout_logprobs))
        assert x.episode["messages"] == y.episode["messages"]


def test_what_cannot_be_recorded_as_asked_is_a_clear_400_and_logprobs_are_the_recorded_ones(tokenizer_for_tests):
    tok = tokenizer_for_tests
    recorder = EpisodeRecorder(Scripted(tok, ["7"]), tok)
    messages = [{"role": "user", "content": "Say 7."}]
    refused = {
        "n=2: an episode is one linear trajectory.*run n episodes": {"n": 2},
        "tool_choice \"required\".*cannot force a tool call": {"tools": [CALCULATOR], "tool_choice": "required"},
        "tool_choice .*calculator.*cannot force": {"tools": [CALCULATOR], "tool_choice": {
            "type": "function", "function": {"name": "calculator"}}},
        "presence_penalty=0.5": {"presence_penalty": 0.5},
        "logit_bias": {"logit_bias": {"7": 5}},
        "response_format 'json_object'": {"response_format": {"type": "json_object"}},
        "top_logprobs=3": {"logprobs": True, "top_logprobs": 3},
        "tools\\[0\\] is not a function tool": {"tools": [{"type": "custom", "custom": {"name": "x"}}]},
        "deprecated function-calling": {"functions": [CALCULATOR["function"]]},
        "unsupported field\\(s\\) top_k": {"extra_body": {"top_k": 5}},
    }
    with serving(recorder) as url:
        client = client_for(url)
        for why, fields in refused.items():
            with pytest.raises(openai.BadRequestError, match=why):
                client.chat.completions.create(model="m", messages=messages, user="t", **fields)
        assert recorder.episodes == {}                            # a refused request records nothing
        reply = client.chat.completions.create(model="m", messages=messages, user="t", logprobs=True, top_logprobs=0,
                                               presence_penalty=0, frequency_penalty=0, store=True,
                                               response_format={"type": "text"}, metadata={"k": "v"})
    content = reply.choices[0].logprobs.content
    [t] = recorder.trajectories()
    assert [c.logprob for c in content] == t.rollout_logprobs == [-0.25] * len(t.response_ids)
    assert "".join(c.token for c in content) == tok.decode(t.response_ids, skip_special_tokens=False)
    assert reply.choices[0].message.content == "7"

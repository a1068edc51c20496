"""Tools: the calculator's exact values, the JSON call format and its failures, schemas of custom
tools, the Python tool through the sandbox, and tool-use arithmetic episodes."""

from __future__ import annotations

import json

import pytest

from rlxf.config.env import EnvConfig
from rlxf.envs.base import EnvError
from rlxf.envs.rollout import EnvRollout
from rlxf.envs.tools import ToolSet, calculator
from rlxf.rollout import SamplingParams
from rlxf.types import Prompt


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.mark.parametrize("expr, value", [("123*456", "56088"), ("(12+34)*56", "2576"), ("7/2", "7/2"),
                                         ("-3**2", "-9"), ("17//5 + 17%5", "5"), ("0.5*4", "2")])
def test_calculator_is_exact(expr, value):
    assert calculator(expr) == value


@pytest.mark.parametrize("expr", ["__import__('os').system('x')", "2**1000", "x+1", "1/0", "(1"])
def test_calculator_rejects(expr):
    with pytest.raises((ValueError, ZeroDivisionError)):
        calculator(expr)


def test_calls_run_in_order_and_failures_are_error_observations():
    tools = ToolSet(["calculator", "env_plugins:word_count", "env_plugins:explode", "env_plugins:garbage"])
    text = ("first " + call("calculator", expression="6*7") + call("word_count", text="a bb ccc", minimum=2)
            + "<tool_call>{not json</tool_call>" + call("nope") + call("calculator", expr="1")
            + call("explode", x=1) + call("garbage", x=1) + '<tool_call>["calculator"]</tool_call>')
    out = ToolSet.run(tools, text, turn=3)
    contents = [m["content"] for m in out.messages]
    assert all(m["role"] == "tool" for m in out.messages)
    # what tool-rendering templates read: the call's id (turn, block) and the name it called, if any
    assert [m["tool_call_id"] for m in out.messages] == [f"call_3_{i}" for i in range(8)]
    assert [m.get("name") for m in out.messages] == ["calculator", "word_count", None, "nope", "calculator",
                                                    "explode", "garbage", None]
    assert contents[:2] == ["42", "2"]
    assert contents[2].startswith("error: Expecting property name")
    assert contents[3] == "error: unknown tool 'nope'; tools: calculator, word_count, explode, garbage"
    assert contents[4].startswith("error: TypeError") and "expr" in contents[4]
    assert contents[5] == "error: RuntimeError: tool crashed"
    assert contents[6].startswith("error: TypeError") and "JSON serializable" in contents[6]
    assert contents[7].startswith('error: a call is {"name"')
    assert (out.calls, out.errors) == (8, 6)
    assert tools.run("no call here", turn=0).messages == []


def test_custom_tool_schema_from_signature_and_docstring():
    [schema] = ToolSet(["env_plugins:word_count"]).schemas
    fn = schema["function"]
    assert fn["name"] == "word_count" and fn["description"] == "Count the words of a text."
    assert fn["parameters"]["properties"] == {
        "text": {"type": "string", "description": "The text to count."},
        "minimum": {"type": "integer", "description": "Only count words at least this long."}}
    assert fn["parameters"]["required"] == ["text"]


def test_tool_errors_name_the_tool():
    with pytest.raises(EnvError, match="tool 'undocumented': cannot build its JSON schema"):
        ToolSet(["env_plugins:undocumented"])
    with pytest.raises(EnvError, match="unknown tool 'abacus'"):
        ToolSet(["abacus"])
    with pytest.raises(EnvError, match="two tools are called 'calculator'"):
        ToolSet(["calculator", "calculator"])


def test_python_tool_runs_in_the_sandbox():
    from rlxf.rewards.sandbox import SandboxUnavailable

    try:
        tools = ToolSet(["python"])
        out = tools.run(call("python", code="print(sum(range(10)))") + call("python", code="raise SystemExit(3)"),
                        turn=0)
    except SandboxUnavailable as e:   # pragma: no cover - a kernel without any isolation at all
        pytest.skip(f"sandbox unavailable: {e}")
    finally:
        tools.close()
    assert out.messages[0]["content"] == "45\n"
    assert out.messages[1]["content"].startswith("error: RuntimeError: program error") and out.errors == 1


class ToolPolicyEngine:
    """Calls the calculator on the expression, then answers with the tool's result (or garbage first)."""

    def __init__(self, tokenizer, bad_first=False):
        self.tokenizer, self.bad_first, self.policy_version = tokenizer, bad_first, 0

    def generate(self, requests, sampling):
        from rlxf.envs.tokens import encode_text
        from rlxf.types import Completion

        out = []
        for r in requests:
            text = self.tokenizer.decode(list(r.prompt_ids))
            if "<|im_start|>tool" not in text:
                expr = text.split("<|im_start|>user\n")[1].split("=")[0]
                reply = "<tool_call>{oops</tool_call>" if self.bad_first else call("calculator", expression=expr)
            else:
                result = text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]
                expr = text.split("<|im_start|>user\n")[1].split("=")[0]
                reply = call("calculator", expression=expr) if result.startswith("error:") else f"The answer is {result}"
            ids = encode_text(self.tokenizer, reply) + [self.tokenizer.eos_token_id]
            out.append([Completion(ids, [-0.1] * len(ids), "stop", 0)])
        return out


def test_compact_tool_description():
    tools = ToolSet(["calculator", "env_plugins:word_count"], "compact")
    assert tools.describe([{"role": "user", "content": "1+1="}]) == [
        {"role": "system", "content": 'Tools, called as <tool_call>{"name": NAME, "arguments": {...}}</tool_call>:\n'
                                      "calculator(expression: string): Evaluate an arithmetic expression exactly.\n"
                                      "word_count(text: string, minimum: integer): Count the words of a text."},
        {"role": "user", "content": "1+1="}]
    assert ToolSet(["calculator"]).describe([])[0]["content"].endswith('"type": "object"}, "return": {"type": "string"}}')
    with pytest.raises(EnvError, match="env.tool_description: 'terse' is not one of schema, compact"):
        ToolSet(["calculator"], "terse")


@pytest.mark.parametrize("bad_first, description", [(False, "schema"), (True, "schema"), (False, "compact")])
def test_tool_arithmetic_episodes(tokenizer_for_tests, bad_first, description):
    rollout = EnvRollout(EnvConfig(name="tool_arithmetic", tools=["calculator"], max_total_tokens=2048,
                                   tool_description=description),
                         ToolPolicyEngine(tokenizer_for_tests, bad_first), tokenizer_for_tests)
    ps = [Prompt(uid="a:0", prompt_ids=[1], prompt_text="", ground_truth="56088",
                 metadata={"expression": "123*456"})]
    [t] = rollout.generate(ps, [0], SamplingParams(n=1, max_new_tokens=64))
    metrics = rollout.score([t], 64)
    roles = [m["role"] for m in t.episode["messages"]]
    assert t.correct and t.reward == 1.0 and t.episode["end"] == "terminated"
    assert roles == ["system", "user"] + ["assistant", "tool"] * (1 + bad_first) + ["assistant"]
    assert t.episode["messages"][0]["content"] == ToolSet(["calculator"], description).describe([])[0]["content"]
    assert metrics["env/tool_call_errors"] == float(bad_first)
    tool_messages = [m for m in t.episode["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [f"call_{k}_0" for k in range(1 + bad_first)]


def test_tool_messages_reach_a_template_that_renders_their_name_and_id(tool_template_tokenizer):
    """Under a template that renders a tool message's name and call id (and refuses one without):
    a good call's answer carries both into the ids; a malformed call's answer has no name to give,
    so the template refuses it and only that episode ends, with the template's reason."""
    tok = tool_template_tokenizer
    ps = [Prompt(uid="a:0", prompt_ids=[1], prompt_text="", ground_truth="56088",
                 metadata={"expression": "123*456"})]
    rollout = EnvRollout(EnvConfig(name="tool_arithmetic", tools=["calculator"], max_total_tokens=2048),
                         ToolPolicyEngine(tok), tok)
    [t] = rollout.generate(ps, [0], SamplingParams(n=1, max_new_tokens=64))
    assert t.episode["error"] is None and t.episode["messages"][3] == {
        "role": "tool", "tool_call_id": "call_0_0", "name": "calculator", "content": "56088"}
    assert '{"name": "calculator", "id": "call_0_0", "content": "56088"}' in tok.decode(t.response_ids)
    broken = EnvRollout(EnvConfig(name="tool_arithmetic", tools=["calculator"], max_total_tokens=2048),
                        ToolPolicyEngine(tok, bad_first=True), tok)
    [t] = broken.generate(ps, [0], SamplingParams(n=1, max_new_tokens=64))
    assert t.episode["end"] == "error" and "needs the name and tool_call_id" in t.episode["error"]
    assert t.episode["turns"] == 1 and sum(t.loss_mask) == 0


def test_hanging_tool_ends_its_episode(tokenizer_for_tests):
    import env_plugins

    class Hanger(ToolPolicyEngine):
        def generate(self, requests, sampling):
            from rlxf.envs.tokens import encode_text
            from rlxf.types import Completion

            ids = encode_text(self.tokenizer, call("hang", x=1)) + [self.tokenizer.eos_token_id]
            return [[Completion(ids, [0.0] * len(ids), "stop", 0)] for _ in requests]

    rollout = EnvRollout(EnvConfig(name="tool_arithmetic", tools=["env_plugins:hang"], step_timeout_s=0.3,
                                   max_total_tokens=2048), Hanger(tokenizer_for_tests), tokenizer_for_tests)
    ps = [Prompt(uid="a:0", prompt_ids=[1], prompt_text="", ground_truth="2", metadata={"expression": "1+1"})]
    try:
        [t] = rollout.generate(ps, [0], SamplingParams(n=1, max_new_tokens=64))
    finally:
        env_plugins.HANG.set()
    assert t.episode["end"] == "error" and "did not return within 0.3 s" in t.episode["error"]
    assert rollout.score([t], 64)["env/step_timeouts"] == 1

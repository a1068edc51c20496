"""Tools the model can call, in the JSON function-call format of tool-using chat templates.

**The call format** (Hermes / Qwen2.5 style, which their chat templates render): anywhere in its
turn the model writes

    <tool_call>{"name": "calculator", "arguments": {"expression": "123*456"}}</tool_call>

one block per call, each a JSON object with ``name`` (a string) and ``arguments`` (an object).
Every call is run and answered, in order, by one message

    {"role": "tool", "tool_call_id": "call_T_I", "name": "calculator", "content": RESULT}

where RESULT is the tool's return value as text (JSON for anything but a string), or
``error: WHY`` for a malformed block (a last ``<tool_call>`` never closed, e.g. a turn cut short,
included), an unknown tool, bad arguments or a tool that raised (or called ``sys.exit()``). The
model sees its mistakes and can learn from them; every failure is counted (``ToolResult.errors``).
``tool_call_id`` and ``name`` are what chat templates read of a tool message besides its content
(Hermes-style templates render the name, Mistral's the id, though those are not append-only;
ChatML, Qwen2.5's and Llama 3.1's read neither): the id is
``call_id(T, I)``, block I of model turn T, as the chat endpoint numbers the ``tool_calls`` it
returns; the name is the one the call gave (left out when the block names none).

Built-in tools: ``calculator`` (exact arithmetic on integers and fractions: + - * / // % **
and parentheses) and ``python`` (a program run in rlxf's code sandbox, ``rlxf.rewards.sandbox``;
its stdout is the result). Your own: a function given as ``package.module:function``; its JSON
schema (shown to the model) is taken from its signature and Google-style docstring by
``transformers.utils.get_json_schema``, so every argument needs a type hint and a description.
"""

from __future__ import annotations

import ast
import json
import operator
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from rlxf.envs.base import EnvError, Message, import_object
from rlxf.models.tokenizer import TOOL_CALL_TAGS

# The tags around a call. Qwen2.5's tokenizer has them as added tokens not flagged special, some
# fine-tunes' flag them special: the model's text keeps them either way (``rlxf.models.tokenizer.reply_text``).
TOOL_CALL = re.compile(f"{TOOL_CALL_TAGS[0]}(.*?){TOOL_CALL_TAGS[1]}", re.DOTALL)


def call_id(turn: int, index: int) -> str:
    """The id of the ``index``-th ``<tool_call>`` block of model turn ``turn`` in an episode (both
    from 0). Made from positions only, so a seeded episode gets the same ids every time, and the
    built-in tool environments and the chat endpoint (``rlxf.envs.chat_protocol.tool_calls``) give
    the same call the same id: a template that renders ids renders the same text on both paths."""
    return f"call_{turn}_{index}"


def parse_call(block: str) -> tuple[str | None, dict[str, Any] | None]:
    """The name and arguments of one ``<tool_call>`` block, each None where the block has no valid
    one (a string ``name``; an object of ``arguments``, ``{}`` when left out). The one reading of a
    call: the tool environments run it, the chat endpoint returns it as an OpenAI tool call. A
    block that is not JSON raises ValueError saying where (nesting too deep for the parser too)."""
    try:
        call = json.loads(block)
    except RecursionError:
        raise ValueError("the call's JSON is nested too deeply to parse") from None
    if not isinstance(call, dict):
        return None, None
    name, args = call.get("name"), call.get("arguments", {})
    return name if isinstance(name, str) else None, args if isinstance(args, dict) else None


@dataclass
class ToolResult:
    """The tool messages answering one model turn, and how many calls failed."""

    messages: list[Message]
    calls: int = 0
    errors: int = 0
    trace: list[dict[str, Any]] = field(default_factory=list)   # [{name, arguments, result, error}]


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
# the largest power: (10**12)**64. Bounded in bits of the numerator and denominator, not in
# magnitude: a tiny base such as 1/999999999999**64 has a huge denominator, and powers of it
# grow without end (millions of digits, a thread holding the GIL for hours)
_POWER_BITS = 64 * (10**12).bit_length()


def _exact(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_exact(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _exact(node.left), _exact(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > 64 or _POWER_BITS < abs(right)
                                             * max(left.numerator.bit_length(), left.denominator.bit_length())):
            raise ValueError("exponents must be integers of at most 64, and a power at most (10**12)**64 in "
                             "its numerator and denominator (exact: 0.1 is 3602879701896397/36028797018963968)")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"unsupported expression element {ast.dump(node)[:40]}; use numbers, + - * / // % ** and ()")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "(12+34)*56".
    """
    if len(expression) > 500:
        raise ValueError("expression longer than 500 characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {e.msg}") from None
    value = _exact(tree.body)
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


class PythonTool:
    """Runs a program in the code sandbox; the result is its stdout (or its error)."""

    def __init__(self, isolation: str = "auto", cpu_s: float = 2.0):
        self.isolation, self.cpu_s = isolation, cpu_s
        self._box = None
        self._lock = threading.Lock()

    def __call__(self, code: str) -> str:
        """Run a Python program and return what it prints.

        Args:
            code: The program; print the values you want to see.
        """
        from rlxf.rewards.sandbox import Sandbox, SandboxLimits, TestCase

        with self._lock:  # one sandbox for every episode, started on the first call
            if self._box is None:
                self._box = Sandbox(SandboxLimits(cpu_s=self.cpu_s), isolation=self.isolation)
        out = self._box.run(code, [TestCase.stdio("")]).tests[0]
        if out.status != "ok":
            raise RuntimeError(f"program {out.status}: {out.stderr[-400:] or out.stdout[-400:]}")
        return out.stdout

    def close(self) -> None:
        if self._box is not None:
            self._box.close()


def tool_schema(fn: Callable, name: str) -> dict[str, Any]:
    """The JSON schema of ``fn`` from its signature and docstring, or an error saying what is missing."""
    from transformers.utils import get_json_schema

    try:
        schema = get_json_schema(fn)
    except Exception as e:  # noqa: BLE001 - transformers raises several types for bad docstrings/hints
        raise EnvError(f"tool {name!r}: cannot build its JSON schema from the signature and docstring ({e}); "
                       f"give every argument a type hint and an `Args:` line in a Google-style docstring") from e
    schema["function"]["name"] = name
    return schema


TOOL_DESCRIPTIONS = ("schema", "compact")


def compact_signature(schema: dict[str, Any]) -> str:
    """One line for an OpenAI function tool: ``name(arg: type, ...): description``.

    The arguments' own descriptions are left out; what remains is the least that still names the
    tool, its arguments and what it does."""
    function = schema["function"]
    properties = function.get("parameters", {}).get("properties", {})
    args = ", ".join(f"{name}: {spec.get('type', 'any')}" for name, spec in properties.items())
    description = function.get("description", "").strip()
    return f"{function['name']}({args}): {description}" if description else f"{function['name']}({args})"


def describe_tools(schemas: list[dict[str, Any]], style: str = "schema") -> str:
    """A system-prompt paragraph listing ``schemas`` (OpenAI function tools) and the call format.

    How rlxf shows tools to the model when its chat template does not render them: the built-in
    tool environments always, the chat endpoint for a template that ignores a request's ``tools``.
    ``style`` ``schema`` lists each tool's JSON schema on a line (what a tool-using chat template
    shows); ``compact`` one ``name(arg: type): description`` line per tool, a few times fewer
    tokens (the calculator's paragraph: 92 tokens instead of 260 with rlxf's built-in tokenizer),
    for models small enough that the prompt's length is most of their compute.
    """
    if style not in TOOL_DESCRIPTIONS:
        raise EnvError(f"unknown tool description style {style!r}; one of {', '.join(TOOL_DESCRIPTIONS)}")
    if style == "compact":
        return "\n".join(['Tools, called as <tool_call>{"name": NAME, "arguments": {...}}</tool_call>:',
                          *(compact_signature(s) for s in schemas)])
    lines = ["You can call tools. To call one, write",
             '<tool_call>{"name": NAME, "arguments": {...}}</tool_call>',
             "and its result comes back in a tool message. Tools:"]
    lines += [json.dumps(s["function"], sort_keys=True) for s in schemas]
    return "\n".join(lines)


def with_tools_described(messages: list[Message], schemas: list[dict[str, Any]],
                         style: str = "schema") -> list[Message]:
    """``messages`` with ``describe_tools(schemas, style)`` in the system message: after the text
    of a first system message, or as a system message put first when there is none."""
    block = describe_tools(schemas, style)
    if messages and messages[0].get("role") == "system":
        system = "\n".join(x for x in (messages[0].get("content"), block) if x)
        return [{**messages[0], "content": system}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


class ToolSet:
    """The tools of a run by name; parses a model turn's calls and runs them.

    ``description`` is how an environment shows them in the system prompt (``describe``):
    ``schema`` (each tool's JSON schema) or ``compact`` (one signature line each; see
    ``describe_tools``).
    """

    def __init__(self, specs: list[str], description: str = "schema"):
        if description not in TOOL_DESCRIPTIONS:
            raise EnvError(f"env.tool_description: {description!r} is not one of {', '.join(TOOL_DESCRIPTIONS)}")
        self.description = description
        self.functions: dict[str, Callable[..., Any]] = {}
        self.schemas: list[dict[str, Any]] = []
        for spec in specs:
            if spec == "calculator":
                name, fn = "calculator", calculator
            elif spec == "python":
                name, fn = "python", PythonTool()
            elif ":" in spec:
                fn = import_object(spec, "tool", "env.tools")
                if not callable(fn):
                    raise EnvError(f"env.tools: {spec!r} is not callable")
                name = spec.partition(":")[2]
            else:
                raise EnvError(f"env.tools: unknown tool {spec!r}; built-in: calculator, python, or "
                               f"`package.module:function` for your own")
            if name in self.functions:
                raise EnvError(f"env.tools: two tools are called {name!r}")
            self.functions[name] = fn
            self.schemas.append(tool_schema(fn.__call__ if isinstance(fn, PythonTool) else fn, name))

    def describe(self, messages: list[Message]) -> list[Message]:
        """``messages`` with these tools described in the system message, in this set's style."""
        return with_tools_described(messages, self.schemas, self.description)

    def run(self, text: str, *, turn: int) -> ToolResult:
        """Run every call in ``text``, model turn ``turn`` of its episode (from 0, for the calls'
        ids); one tool message per call (none when the turn has no call)."""
        out = ToolResult(messages=[])
        for index, block in enumerate(TOOL_CALL.findall(text)):
            out.calls += 1
            name, args, error, result = None, None, None, None
            try:
                name, args = parse_call(block)
                if name is None or args is None:
                    raise ValueError('a call is {"name": string, "arguments": object}')
                if name not in self.functions:
                    raise ValueError(f"unknown tool {name!r}; tools: {', '.join(self.functions)}")
                value = self.functions[name](**args)
                result = value if isinstance(value, str) else json.dumps(value)
            except KeyboardInterrupt:
                raise
            # a bad call is the model's to learn from, even one that ends in sys.exit() (a wrapped
            # CLI's main()): SystemExit is the tool's failure, not the run's
            except BaseException as e:  # noqa: BLE001
                error = f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)
            if error is not None:
                out.errors += 1
            message = {"role": "tool", "tool_call_id": call_id(turn, index),
                       **({"name": name} if name is not None else {}),
                       "content": result if error is None else f"error: {error}"}
            out.messages.append(message)
            out.trace.append({"name": name, "arguments": args, "result": result, "error": error})
        if text.rfind("<tool_call>") > text.rfind("</tool_call>"):   # a last block never closed (cut short?)
            error = "the <tool_call> block is not closed; end each call with </tool_call>"
            out.calls, out.errors = out.calls + 1, out.errors + 1
            out.messages.append({"role": "tool", "tool_call_id": call_id(turn, len(out.trace)),
                                 "content": f"error: {error}"})
            out.trace.append({"name": None, "arguments": None, "result": None, "error": error})
        return out

    def close(self) -> None:
        for fn in self.functions.values():
            close = getattr(fn, "close", None)
            if isinstance(fn, PythonTool) and close is not None:
                close()

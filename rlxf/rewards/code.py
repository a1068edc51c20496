r"""Run the response's Python against the sample's test cases in the sandbox.

    score = (tests passed) / (tests)        (or all-or-nothing with partial_credit=False)

The code is the last (or first) fenced ```python block of the response, or the whole
response. The ground truth holds the tests, in any of these forms::

    [{"input": "1 2\n", "output": "3\n"}, ...]                  stdin -> expected stdout
    ["assert add(1, 2) == 3", {"assert": "assert add(0, 0) == 0"}]  Python run after the program
    [{"fn_name": "add", "args": [1, 2], "expected": 3}, ...]    call a function (or Solution method)
    {"tests": [...]}                                            any of the above, wrapped
    {"inputs": [...], "outputs": [...], "fn_name": "f"}        APPS / TACO style (fn_name optional)

A JSON string holding any of these works too. A response without code scores 0 (metric
``no_code``); unusable tests are a verifier error.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from rlxf.rewards.base import AsyncVerifier
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxResult, TestCase, TestOutcome
from rlxf.rewards.types import RewardInput, RewardResult

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CodeTest:
    """A test case and what passing it means."""

    case: TestCase
    expected: Any = None          # stdio: expected stdout; call: expected return value; assert: unused


def extract_code(text: str, how: str = "last_block") -> str | None:
    """The code to run: the last / first fenced block, or the whole text (``full``)."""
    if how == "full":
        return text.strip() or None
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if not blocks:
        return None
    return blocks[-1] if how == "last_block" else blocks[0]


def parse_tests(ground_truth: Any) -> list[CodeTest]:
    """The tests in a ground truth (see the module doc). Raises ValueError if there are none."""
    gt = ground_truth
    if isinstance(gt, str):
        try:
            gt = json.loads(gt)
        except json.JSONDecodeError:
            raise ValueError("the ground truth is a string but not JSON tests") from None
    if isinstance(gt, dict) and "tests" in gt:
        gt = gt["tests"]
    tests: list[CodeTest] = []
    if isinstance(gt, dict) and "inputs" in gt and "outputs" in gt:
        inputs, outputs, fn_name = gt["inputs"], gt["outputs"], gt.get("fn_name")
        if len(inputs) != len(outputs):
            raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
        for inp, out in zip(inputs, outputs, strict=True):
            if fn_name:
                args = inp if isinstance(inp, list) else [inp]
                tests.append(CodeTest(TestCase.call(fn_name, args), out))
            else:
                tests.append(CodeTest(TestCase.stdio(_text(inp)), _text(out)))
    elif isinstance(gt, list):
        tests = [_one_test(item) for item in gt]
    else:
        raise ValueError(f"no tests found in a ground truth of type {type(gt).__name__}")
    if not tests:
        raise ValueError("the ground truth has an empty list of tests")
    return tests


def _text(value: Any) -> str:
    return "\n".join(map(str, value)) + "\n" if isinstance(value, list) else str(value)


def _one_test(item: Any) -> CodeTest:
    if isinstance(item, str):
        return CodeTest(TestCase.assertion(item))
    if not isinstance(item, dict):
        raise ValueError(f"a test must be a string or a dict, not {type(item).__name__}")
    if "assert" in item:
        return CodeTest(TestCase.assertion(item["assert"]))
    if item.get("fn_name"):
        args = item.get("args", item.get("input", []))
        expected = item.get("expected", item.get("output"))
        return CodeTest(TestCase.call(item["fn_name"], args if isinstance(args, list) else [args]), expected)
    stdin = item.get("input", item.get("stdin"))
    stdout = item.get("output", item.get("stdout"))
    if stdin is None or stdout is None:
        raise ValueError(f"a test dict needs input/output, assert, or fn_name/args/expected; got keys {sorted(item)}")
    return CodeTest(TestCase.stdio(_text(stdin)), _text(stdout))


def outputs_match(actual: str, expected: str, mode: str = "tokens", float_tol: float = 1e-6) -> bool:
    """Compare a program's stdout with the expected one.

    ``tokens``: same whitespace-separated tokens, numbers equal within ``float_tol`` (absolute
    or relative); ``lines``: same lines up to trailing whitespace and trailing blank lines;
    ``exact``: identical.
    """
    if mode == "exact":
        return actual == expected
    if mode == "lines":
        def lines(text: str) -> list[str]:
            out = [line.rstrip() for line in text.splitlines()]
            while out and not out[-1]:
                out.pop()
            return out
        return lines(actual) == lines(expected)
    a, b = actual.split(), expected.split()
    return len(a) == len(b) and all(x == y or _close(x, y, float_tol) for x, y in zip(a, b, strict=True))


def _close(x: str, y: str, tol: float) -> bool:
    try:
        fx, fy = float(x), float(y)
    except ValueError:
        return False
    return math.isclose(fx, fy, rel_tol=tol, abs_tol=tol)


def values_match(actual: Any, expected: Any, tol: float = 1e-6) -> bool:
    """JSON values equal, floats within ``tol``, tuples as lists."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        return math.isclose(actual, expected, rel_tol=tol, abs_tol=tol)
    if isinstance(actual, list) and isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(values_match(a, e, tol) for a, e in zip(actual, expected, strict=True))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == {str(k) for k in expected} and all(
            values_match(actual[str(k)], v, tol) for k, v in expected.items())
    return actual == expected


class CodeVerifier(AsyncVerifier):
    """Fraction of test cases the response's program passes, run in a ``Sandbox``."""

    def __init__(self, name: str, sandbox: Sandbox, *, extract: str = "last_block", compare: str = "tokens",
                 float_tol: float = 1e-6, partial_credit: bool = True, fail_fast: bool = False):
        super().__init__(name, concurrency=sandbox.concurrency)
        self.sandbox = sandbox
        self.extract = extract
        self.compare = compare
        self.float_tol = float_tol
        self.partial_credit = partial_credit
        self.fail_fast = fail_fast

    @classmethod
    def from_config(cls, cfg: Any) -> CodeVerifier:
        limits = SandboxLimits(cpu_s=cfg.cpu_s, wall_s=cfg.wall_s, memory_mb=cfg.memory_mb,
                               max_processes=cfg.max_processes, max_open_files=cfg.max_open_files,
                               max_file_mb=cfg.max_file_mb, tmp_mb=cfg.tmp_mb)
        sandbox = Sandbox(limits, concurrency=cfg.concurrency, isolation=cfg.isolation,
                          sandbox_uid=cfg.sandbox_uid)
        return cls(cfg.label, sandbox, extract=cfg.extract, compare=cfg.compare, float_tol=cfg.float_tol,
                   partial_credit=cfg.partial_credit, fail_fast=cfg.fail_fast)

    def passed(self, test: CodeTest, outcome: TestOutcome, result: SandboxResult) -> bool:
        if outcome.status != "ok":
            return False
        kind = test.case.kind
        if kind == "stdio":
            return not outcome.stdout_truncated and outputs_match(outcome.stdout, test.expected, self.compare,
                                                                  self.float_tol)
        if kind == "assert":
            return outcome.result == result.nonce
        try:
            value = json.loads(outcome.result)
        except json.JSONDecodeError:
            return False
        if values_match(value, test.expected, self.float_tol):
            return True
        # APPS wraps a call's expected value in a one-element list
        wrapped = test.expected
        return isinstance(wrapped, list) and len(wrapped) == 1 and values_match(value, wrapped[0], self.float_tol)

    async def ascore(self, x: RewardInput) -> RewardResult:
        try:
            tests = parse_tests(x.ground_truth)
        except (ValueError, TypeError, KeyError) as e:
            return RewardResult.failed(f"unusable code tests: {e}")
        code = extract_code(x.response, self.extract)
        if code is None:
            return RewardResult(0.0, {"no_code": 1.0, "correct": 0.0, "pass_rate": 0.0})
        result = await self.sandbox.arun(code, [t.case for t in tests], fail_fast=self.fail_fast)
        if result.error:
            return RewardResult.failed(f"sandbox: {result.error}")
        passed = [self.passed(t, o, result) for t, o in zip(tests, result.tests, strict=True)]
        rate = sum(passed) / len(passed)
        statuses = [o.status for o in result.tests]
        metrics = {"no_code": 0.0, "correct": float(all(passed)), "pass_rate": rate,
                   "timeouts": float(sum(s in ("timeout", "wall_timeout") for s in statuses)),
                   "runtime_errors": float(sum(s in ("error", "memory", "killed", "output_limit") for s in statuses)),
                   "cpu_s": sum(o.cpu_s for o in result.tests)}
        if any(s == "setup_error" for s in statuses):
            detail = next(o.stderr for o in result.tests if o.status == "setup_error")
            return RewardResult.failed(f"the sandbox could not set up a test process: {detail[-300:]}")
        return RewardResult(rate if self.partial_credit else float(all(passed)), metrics)

    def close(self) -> None:
        self.sandbox.close()

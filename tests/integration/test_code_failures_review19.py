"""Every failed code test is counted in one named metric: a program that ends with status 0
before it reports its answer (sys.exit(0), os._exit(0)) scored 0 with no metric saying why."""

from __future__ import annotations

import sys

import pytest

from rlxf.rewards import RewardInput, sandbox
from rlxf.rewards.code import FAILURES, CodeTest, CodeVerifier, failure, parse_tests
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable

linux = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
CALL = {"fn_name": "add", "args": [1, 2], "expected": 3}


@pytest.fixture(scope="module")
def verifier():
    try:
        box = Sandbox(SandboxLimits(cpu_s=1, wall_s=15), concurrency=1)
    except SandboxUnavailable as e:
        pytest.skip(str(e))
    v = CodeVerifier("code", box)
    yield v
    v.close()


def _failures(verifier, code: str, tests) -> dict[str, float]:
    r = verifier.score(RewardInput("task", f"```python\n{code}\n```", tests))
    assert r.error is None and r.score == 0.0
    return {name: r.metrics[name] for name in FAILURES if r.metrics[name]}


@linux
@pytest.mark.parametrize("exit_call", ["__import__('os')._exit(0)", "__import__('sys').exit(0)"])
def test_a_program_that_exits_before_its_answer_is_counted_as_exited_early(verifier, exit_call):
    code = f"def add(a, b):\n    return a + b\n{exit_call}"
    tests = [CALL, "assert add(1, 2) == 3", "for i in range(3): assert add(i, 0) == i"]  # call, eval, assert
    assert _failures(verifier, code, tests) == {"exited_early": 3.0}


@linux
def test_wrong_answers_and_raising_expressions_are_named(verifier):
    code = "def add(a, b):\n    if a == 1: raise ValueError('no')\n    return 0\nprint(2)"
    tests = [{"input": "", "output": "1\n"}, "assert add(1, 2) == 3", "assert add(2, 2) == 4", CALL]
    assert _failures(verifier, code, tests) == {"wrong_answers": 2.0, "runtime_errors": 2.0}


def _outcome(status: str, result: str = "", truncated: bool = False) -> sandbox.TestOutcome:
    return sandbox.TestOutcome(status, result=result, stdout_truncated=truncated)


@pytest.mark.parametrize(("test", "outcome", "why"), [
    (parse_tests([CALL])[0], _outcome("ok"), "exited_early"),
    (parse_tests([CALL])[0], _outcome("ok", "4"), "wrong_answers"),
    (parse_tests(["assert f(1) == 2"])[0], _outcome("ok", '[{"error": "ZeroDivisionError"}]'), "runtime_errors"),
    (parse_tests(["assert f(1) == 2"])[0], _outcome("ok", '[{"value": 3}]'), "wrong_answers"),
    (parse_tests([{"input": "", "output": "1"}])[0], _outcome("ok", truncated=True), "runtime_errors"),
    (parse_tests([{"input": "", "output": "1"}])[0], _outcome("ok"), "wrong_answers"),
    (parse_tests([CALL])[0], _outcome("wall_timeout"), "timeouts"),
    (parse_tests([CALL])[0], _outcome("killed"), "runtime_errors"),
    (parse_tests([CALL])[0], _outcome("stray_processes", "3"), "stray_processes"),
    (parse_tests([CALL])[0], _outcome("skipped"), "skipped"),
])
def test_each_failed_outcome_has_one_named_reason(test: CodeTest, outcome: sandbox.TestOutcome, why: str):
    assert failure(test, outcome) == why and why in FAILURES

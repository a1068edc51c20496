"""A failed unparsed assert test (one run as written in the sandbox's judge) is a wrong answer
when the test's own assertion failed, and a runtime error when the program raised -- an
AssertionError of the program's included. Every such failure was counted as a runtime error."""

from __future__ import annotations

import sys

import pytest

from rlxf.rewards import RewardInput, sandbox
from rlxf.rewards.code import FAILURES, CodeVerifier, failure, parse_tests
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable
from rlxf.rewards.sandbox._runner import ASSERTION_FAILED

PROGRAM = """
def f(x):
    return x

def apply(callback, value):
    try:
        callback(value)
    except AssertionError:
        pass   # the test's assertion fails all the same

def g(x):
    raise AssertionError("the program's own")

def h(x):
    raise ValueError("no")
"""
WRONG = [
    "assert f(1) == 2 and f(2) == 2",  # a BoolOp: not parsed
    "for i in range(2):\n    assert f(i) == i + 1",  # a loop
    "def check(v):\n    assert v == 3\napply(check, 2)",  # a callback's assertion the program catches
]
RAISING = [
    "assert g(1) == 1 and True",  # the program's AssertionError
    "try:\n    g(1)\nexcept ValueError:\n    pass",  # ... not caught by the test
    "assert h(1) == 1 and True",  # the program's ValueError
]
PASSING = ["assert f(1) == 1 and f(2) == 2"]


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
def test_the_tests_failed_assertion_is_a_wrong_answer_and_the_programs_exception_a_runtime_error():
    try:
        box = Sandbox(SandboxLimits(cpu_s=1, wall_s=15), concurrency=1)
    except SandboxUnavailable as e:
        pytest.skip(str(e))
    verifier = CodeVerifier("code", box)
    tests = WRONG + RAISING + PASSING
    try:
        r = verifier.score(RewardInput("task", f"```python\n{PROGRAM}\n```", tests))
    finally:
        verifier.close()
    assert r.error is None and r.metrics["unparsed_asserts"] == len(tests)
    assert r.score == pytest.approx(1 / 7)
    assert {name: r.metrics[name] for name in FAILURES if r.metrics[name]} == {
        "wrong_answers": 3.0,
        "runtime_errors": 3.0,
    }


def test_only_the_judges_report_of_a_failed_assertion_makes_a_wrong_answer():
    test = parse_tests(["assert f(1) == 2 and f(2) == 3"])[0]
    assert failure(test, sandbox.TestOutcome("error", result=ASSERTION_FAILED)) == "wrong_answers"
    assert failure(test, sandbox.TestOutcome("error")) == "runtime_errors"
    assert failure(test, sandbox.TestOutcome("timeout", result=ASSERTION_FAILED)) == "timeouts"

"""More reward hacking through the code verifier, found by an adversarial review: a program
that drops the padding an expected token asks for, and call tests that expect nothing. Each
hack scores 0 (or the tests are refused), and the correct program beside it scores 1."""

from __future__ import annotations

import sys
import textwrap

import pytest

from rlxf.rewards.code import CodeVerifier, outputs_match, parse_tests
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable
from rlxf.rewards.types import RewardInput

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")


def fenced(code: str) -> str:
    return f"```python\n{textwrap.dedent(code).strip()}\n```"


@pytest.fixture(scope="module")
def verifier():
    try:
        box = Sandbox(SandboxLimits(cpu_s=1, wall_s=15), concurrency=2)
    except SandboxUnavailable as e:
        pytest.skip(f"strict sandbox isolation unavailable here: {e}")
    v = CodeVerifier("code", box)
    yield v
    v.close()


def test_an_expected_token_with_leading_zeros_or_a_sign_is_compared_as_text(verifier):
    # "print n as a 4-digit PIN": 42 -> 0042; the unpadded number is the wrong answer
    tests = [{"input": "42\n", "output": "0042\n"}, {"input": "7\n", "output": "0007\n"},
             {"input": "1234\n", "output": "1234\n"}]
    unpadded = fenced("print(int(input()))")
    padded = fenced("print(f'{int(input()):04d}')")
    assert verifier.score(RewardInput("pin", unpadded, tests)).score == pytest.approx(1 / 3)
    assert verifier.score(RewardInput("pin", padded, tests)).score == 1.0
    assert not outputs_match("5\n", "+5\n") and not outputs_match("905", "0905")
    # numbers still compare as numbers where the expected token is a plain number
    assert outputs_match("3.0000001 0.5 1e3", "3 0.50 1000") and outputs_match("0", "-0")


def test_a_call_test_without_an_expected_value_is_unusable_not_passed_by_returning_none(verifier):
    tests = [{"fn_name": "add", "args": [1, 2]}, {"fn_name": "add", "args": [3, 4], "result": 7}]
    returns_none = fenced("def add(a, b):\n    pass")
    r = verifier.score(RewardInput("add", returns_none, tests))
    assert r.error is not None and "expected value" in r.error
    with pytest.raises(ValueError, match="expected value"):
        parse_tests(tests)
    # an explicit expected None (or output) is still a test
    explicit = [{"fn_name": "add", "args": [1, 2], "expected": None}, {"fn_name": "add", "args": [1, 2], "output": 3}]
    assert [t.expected for t in parse_tests(explicit)] == [None, 3]
    right = fenced("def add(a, b):\n    return a + b")
    assert verifier.score(RewardInput("add", right, [{"fn_name": "add", "args": [1, 2], "expected": 3}])).score == 1.0

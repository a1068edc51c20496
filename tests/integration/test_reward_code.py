"""The code verifier end to end: hand-written right and wrong programs for each test format,
partial credit, and the config path (reward.verifiers: [{type: code}])."""

from __future__ import annotations

import sys
import textwrap

import pytest

from rlxf.config.reward import RewardConfig
from rlxf.rewards import LocalReward, RewardInput
from rlxf.rewards.code import CodeVerifier, outputs_match, parse_tests
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

STDIO = [{"input": "3\n1 2 3\n", "output": "6\n"}, {"input": "2\n-5 5\n", "output": "0\n"},
         {"input": "1\n7\n", "output": "7\n"}]
ASSERTS = ["assert fib(0) == 0", "assert fib(1) == 1", "assert fib(10) == 55", "assert fib(20) == 6765"]
CALLS = {"inputs": [[[3, 1, 2]], [[]], [[5, 5, 1]]], "outputs": [[[1, 2, 3]], [[]], [[1, 5, 5]]],
         "fn_name": "sort_list"}


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{textwrap.dedent(code).strip()}\n```\nDone."


@pytest.fixture(scope="module")
def verifier():
    try:
        box = Sandbox(SandboxLimits(cpu_s=1, wall_s=15), concurrency=2)
    except SandboxUnavailable as e:
        pytest.skip(str(e))
    v = CodeVerifier("code", box)
    yield v
    v.close()


def score(verifier, response, tests):
    return verifier.score(RewardInput("task", response, tests))


def test_stdio_right_and_wrong(verifier):
    right = fenced("""
        n = int(input())
        print(sum(map(int, input().split())))
    """)
    off_by_one = fenced("""
        n = int(input())
        print(sum(map(int, input().split())) + (n == 1))
    """)
    r = score(verifier, right, STDIO)
    assert (r.score, r.metrics["correct"], r.metrics["pass_rate"], r.error) == (1.0, 1.0, 1.0, None)
    w = score(verifier, off_by_one, STDIO)
    assert w.score == pytest.approx(2 / 3) and w.metrics["correct"] == 0.0


def test_assert_tests_right_wrong_and_partial(verifier):
    right = fenced("""
        def fib(n):
            a, b = 0, 1
            for _ in range(n):
                a, b = b, a + b
            return a
    """)
    wrong_base = fenced("""
        def fib(n):
            return 1 if n < 2 else fib(n - 1) + fib(n - 2)
    """)  # computes F(n+1): fib(0)=1 x, fib(1)=1 ok, fib(10)=89 x, fib(20)=10946 x
    slow = fenced("""
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        fib(40)
    """)  # correct, but ~20 s of CPU before any assertion runs: over the 1 s budget
    assert score(verifier, right, ASSERTS).score == 1.0
    assert score(verifier, wrong_base, ASSERTS).score == pytest.approx(1 / 4)
    s = score(verifier, slow, ASSERTS[:2])
    assert s.score == 0.0 and s.metrics["timeouts"] == 2


def test_call_tests_apps_style(verifier):
    right = fenced("""
        def sort_list(xs):
            return sorted(xs)
    """)
    as_method = fenced("""
        class Solution:
            def sort_list(self, xs):
                return tuple(sorted(xs))
    """)
    reversed_ = fenced("""
        def sort_list(xs):
            return sorted(xs, reverse=True)
    """)
    missing = fenced("""
        def sort_numbers(xs):
            return sorted(xs)
    """)
    assert score(verifier, right, CALLS).score == 1.0
    assert score(verifier, as_method, CALLS).score == 1.0
    assert score(verifier, reversed_, CALLS).score == pytest.approx(1 / 3)  # only [] is right
    assert score(verifier, missing, CALLS).score == 0.0


def test_no_code_and_bad_tests(verifier):
    none = score(verifier, "I would use a loop.", STDIO)
    assert (none.score, none.metrics["no_code"], none.error) == (0.0, 1.0, None)
    bad = score(verifier, fenced("print(1)"), {"oops": 1})
    assert bad.error is not None and "unusable code tests" in bad.error


def test_all_or_nothing_and_fail_fast(verifier):
    box = verifier.sandbox
    strict = CodeVerifier("code", box, partial_credit=False, fail_fast=True)
    half = fenced("""
        n = int(input())
        print(6)
    """)
    r = strict.score(RewardInput("t", half, STDIO))
    assert r.score == 0.0 and r.metrics["pass_rate"] == pytest.approx(1 / 3)  # tests 2, 3 skipped


def test_code_verifier_from_config_in_a_local_reward():
    cfg = RewardConfig.model_validate({"verifiers": [
        {"type": "code", "cpu_s": 1, "concurrency": 2},
        {"type": "format", "pattern": "```python", "weight": 0.1}]})
    try:
        scorer = LocalReward(cfg)
    except SandboxUnavailable as e:
        pytest.skip(str(e))
    right = fenced("n = int(input())\nprint(sum(map(int, input().split())))")
    with scorer:
        out = scorer.score([RewardInput("t", right, STDIO), RewardInput("t", "no code", STDIO)] * 3)
    assert [s.reward for s in out] == pytest.approx([1.1, 0.0] * 3)
    assert [s.correct for s in out] == [True, False] * 3


# programs that game the comparison: a dropped padding, a call test that expects nothing

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

"""Review 18 of the code verifier: a test that is not valid Python is the dataset's fault, so
it is a verifier error naming the test, not a 0 for every program."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from rlxf.rewards.code import CodeVerifier, parse_tests
from rlxf.rewards.types import RewardInput


@pytest.mark.parametrize(("tests", "said"), [
    (["assert f(1) == 1", "assert f(1) == 2 )"], "test 1: the assert test 'assert f(1) == 2 )' is not valid "
                                                 "Python (line 1: unmatched ')')"),
    ([{"assert": "for i in range(2)\n    assert f(i) == i"}], "test 0: the assert test 'for i in range(2)"),
    (["return f(1) == 1"], "(line 1: 'return' outside function)"),
    (["assert f(1) == 1\x00"], "null bytes"),
    ([{"assert": 5}], "test 0: an assert test must be Python source text, not int"),
])
def test_a_test_that_is_not_python_is_named(tests, said):
    with pytest.raises(ValueError, match="fix the test's source|Python source text") as e:
        parse_tests(tests)
    assert said in str(e.value)


def test_the_verifier_fails_instead_of_scoring_zero():
    sandbox = SimpleNamespace(concurrency=1)  # never reached: the tests are refused first
    verifier = CodeVerifier("code", sandbox)
    result = asyncio.run(verifier.ascore(RewardInput("p", "```python\ndef f(x):\n    return x\n```",
                                                     ["assert f(1) == 1", "assert f(2) == 2 )"])))
    assert result.error is not None and "test 1" in result.error and result.score == 0.0

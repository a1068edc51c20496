"""Code verifier pieces that need no sandbox: code extraction, test formats, output comparison."""

import pytest

from rlxf.rewards.code import extract_code, outputs_match, parse_tests, values_match


def test_extract_code_blocks():
    text = "first\n```python\nprint(1)\n```\nthen\n```py\nprint(2)\n```\nand ```\nprint(3)\n```"
    assert extract_code(text, "last_block") == "print(3)\n"
    assert extract_code(text, "first_block") == "print(1)\n"
    assert extract_code("print(4)", "full") == "print(4)"
    assert extract_code("no code at all", "last_block") is None
    assert extract_code("```python\n\n```", "last_block") is None
    assert extract_code("```Python3\nx = 1\n```") == "x = 1\n"


def test_parse_stdio_assert_and_call_tests():
    tests = parse_tests([{"input": "1 2\n", "output": "3\n"}, "assert f(1) == 2",
                         {"assert": "assert f(0) == 1"}, {"fn_name": "f", "args": [3], "expected": 4}])
    kinds = [t.case.kind for t in tests]
    assert kinds == ["stdio", "eval", "eval", "call"]  # asserts parsed: compared outside the sandbox
    assert (tests[0].case.stdin, tests[0].expected) == ("1 2\n", "3\n")
    assert tests[1].case.exprs == ("f(1)",) and tests[1].checks[0].expected == 2
    assert (tests[3].case.fn_name, tests[3].case.args, tests[3].expected) == ("f", (3,), 4)


def test_parse_apps_style_and_json_strings():
    stdio = parse_tests('{"inputs": ["1\\n", ["2", "3"]], "outputs": ["a\\n", ["b", "c"]]}')
    assert [(t.case.stdin, t.expected) for t in stdio] == [("1\n", "a\n"), ("2\n3\n", "b\nc\n")]
    call = parse_tests({"inputs": [[1, 2], [5, 5]], "outputs": [[3], [10]], "fn_name": "add"})
    assert [(t.case.fn_name, t.case.args, t.expected) for t in call] == [("add", (1, 2), [3]), ("add", (5, 5), [10])]
    assert len(parse_tests({"tests": ["assert True"]})) == 1


@pytest.mark.parametrize("bad, message", [
    (None, "no tests"), ([], "empty"), ("not json", "not JSON"), ([{"foo": 1}], "input/output"),
    ({"inputs": [1, 2], "outputs": [1]}, "2 inputs but 1 outputs"), ([3], "string or a dict"),
])
def test_unusable_tests_raise(bad, message):
    with pytest.raises(ValueError, match=message):
        parse_tests(bad)


@pytest.mark.parametrize("actual, expected, mode, ok", [
    ("3\n", "3", "tokens", True),
    ("1 2  3\n\n", "1 2 3", "tokens", True),
    ("0.3333333", "0.33333333", "tokens", True),
    ("0.34", "0.33", "tokens", False),
    ("YES", "yes", "tokens", False),
    ("1 2", "1 2 3", "tokens", False),
    ("a  \nb\n\n", "a\nb", "lines", True),
    ("a b", "a  b", "lines", False),
    ("x\n", "x", "exact", False),
    ("x\n", "x\n", "exact", True),
    # integers exactly: a relative 1e-6 would take 1000000007 for 1000000000, and a 400-digit
    # integer is inf as a float, as 'inf' and '1e400' are
    ("1000000000", "1000000007", "tokens", False),
    ("inf", str(2**1100), "tokens", False),
    ("1e400", str(2**1400), "tokens", False),
    (str(2**1100), str(2**1100), "tokens", True),
    ("3", "3.0", "tokens", True),
    ("inf", "inf", "tokens", True),
])
def test_outputs_match(actual, expected, mode, ok):
    assert outputs_match(actual, expected, mode) is ok


def test_values_match():
    assert values_match([1, [2, 3]], (1, (2, 3)))
    assert values_match(0.1 + 0.2, 0.3)
    assert not values_match(1, 2)
    assert values_match({"a": 1}, {"a": 1.0})
    assert not values_match(True, 1)  # a bool answer is not a number answer
    assert not values_match([1, 2], [1, 2, 3])
    assert values_match("s", "s") and not values_match("s", "t")
    # integers exactly, however large; a float never matches an integer too large for floats
    assert not values_match(123456700, 123456789)
    assert values_match(2**1100, 2**1100) and not values_match(2**1100, 2**1100 + 1)
    assert not values_match(2**1100, float("inf")) and not values_match(2**1100, 1.5)
    assert values_match(3, 3.0) and values_match(float("inf"), float("inf"))

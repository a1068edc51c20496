"""Answer extraction and number parsing on hand-written responses."""

import pytest

from rlxf.rewards.extract import answer_tag, boxed, extract_answer, last_line, last_number, parse_number


def test_answer_tag_takes_the_last_and_strips():
    text = "<answer>1</answer> wait, no: <answer>\n 2 \n</answer>"
    assert answer_tag(text) == "2"
    assert answer_tag("<final>7</final>", tag="final") == "7"
    assert answer_tag("<answer>unclosed") is None


def test_boxed_balances_nested_braces_and_takes_the_last():
    assert boxed(r"first \boxed{1}, finally \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert boxed(r"\fbox{x}") == "x"
    assert boxed(r"\boxed{never closed") is None
    assert boxed("no box") is None


@pytest.mark.parametrize("text, expected", [
    ("3 apples and 12 pears", "12"),
    ("it is -4.5 degrees", "-4.5"),
    ("total 1,250,000 dollars", "1250000"),
    ("ratio 3/4", "3/4"),
    ("tiny 1e-3", "1e-3"),
    ("no digits", None),
])
def test_last_number(text, expected):
    assert last_number(text) == expected


def test_last_line_skips_blank_lines():
    assert last_line("work\n\nanswer: 5\n\n  \n") == "answer: 5"
    assert last_line("   ") is None


def test_extract_answer_uses_the_first_strategy_that_finds_something():
    text = r"so \boxed{5} and then <answer>6</answer> and 7"
    assert extract_answer(text, ["answer_tag", "boxed"]) == ("6", "answer_tag")
    assert extract_answer(text, ["boxed", "answer_tag"]) == ("5", "boxed")
    assert extract_answer("only 8 here", ["answer_tag", "boxed", "last_number"]) == ("8", "last_number")
    assert extract_answer("  whole  ", ["full"]) == ("whole", "full")
    assert extract_answer("nothing", ["answer_tag", "boxed"]) is None
    with pytest.raises(ValueError, match="unknown extraction"):
        extract_answer("x", ["bogus"])


@pytest.mark.parametrize("text, value", [
    ("42", 42.0), ("-7", -7.0), ("1,234.5", 1234.5), ("3/4", 0.75), (r"\frac{3}{4}", 0.75),
    (r"-\frac{1}{2}", -0.5), ("$2.5$", 2.5), ("50%", 0.5), ("1e3", 1000.0),
])
def test_parse_number_accepts(text, value):
    assert parse_number(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["(1,2)", "1,2", "x+1", "1/0", "", "12,34"])
def test_parse_number_rejects(text):
    assert parse_number(text) is None

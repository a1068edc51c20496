"""Numbers are compared exactly, and alike by the numeric and math verifiers.

As floats 1e-400 was 0 (so it matched a reference of 0, and 2e-400 matched 1e-400) and 1e400 was
inf (so it matched nothing, itself included). math-verify rounds decimals to places and drops
tiny differences, so 0.0 or 10^{-30} matched any small constant such as e^{-50}.
"""

from __future__ import annotations

import math

import pytest

from rlxf.rewards.answers import NumericVerifier, numbers_match
from rlxf.rewards.extract import numeral, parse_number
from rlxf.rewards.types import RewardInput

pytest.importorskip("math_verify")

from rlxf.rewards.answers import MathVerifier  # noqa: E402


def _score(verifier, answer: str, gold: str) -> float:
    return verifier.score(RewardInput("q", f"<answer>{answer}</answer>", gold)).score


@pytest.fixture(scope="module", params=["numeric", "math"])
def verifier(request):
    # the same expectations for both: MathVerifier compares numbers as NumericVerifier does
    return NumericVerifier("numeric") if request.param == "numeric" else MathVerifier("math")


@pytest.mark.parametrize(
    "answer, gold, expected",
    [
        ("1e-400", "0", 0.0),  # as floats both were 0.0
        ("0", "1e-400", 0.0),
        ("1e-400", "0.0", 0.0),
        ("2e-400", "1e-400", 0.0),  # |2e-400 - 1e-400| = 1e-400 > 1e-6 * 2e-400
        ("1e-400", "1e-500", 0.0),
        ("1e-400", "1e-400", 1.0),
        ("1.0000001e-400", "1e-400", 1.0),  # relative difference 1e-7 <= 1e-6
        ("1e400", "1e400", 1.0),  # as floats both were inf, and inf matched nothing
        ("1e400", "2e400", 0.0),
        ("0.333333", "1/3", 1.0),  # |1/3 - 333333/10^6| = 1/(3*10^6) = 1e-6 * 1/3 exactly
        ("0.33333", "1/3", 0.0),  # 1/(3*10^5) > 1e-6 * 1/3
        ("1e5000", "1", 0.0),  # an exponent past 4,000 is not read
    ],
)
def test_numbers_compare_exactly(verifier, answer, gold, expected):
    assert _score(verifier, answer, gold) == expected


def test_numbers_match_reads_the_tolerance_as_the_decimal_it_is_written_as():
    # Fraction(1e-6) is 0.999999999999999954748e-6: the boundary case above would fail with it
    assert numbers_match("1/3", "0.333333", 1e-6) and not numbers_match("1/3", "0.333333", 1e-7)
    assert numbers_match("5", "5.4", 1e-6, abs_tol=0.5) and not numbers_match("5", "6", 1e-6, abs_tol=2)


def test_an_exponent_past_four_thousand_is_not_a_number_and_a_reference_so_written_is_named():
    assert numeral("1e4000") == "1e4000" and numeral("1e4001") is None and numeral("10^{-4001}") is None
    assert parse_number("1e-400") == parse_number("10^{-400}") != 0
    result = NumericVerifier("numeric").score(RewardInput("q", "<answer>1</answer>", "1e5000"))
    assert result.error is not None and "'1e5000' is not a number" in result.error


@pytest.mark.parametrize("option", ["rel_tol", "abs_tol"])
@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0])
def test_a_tolerance_that_is_not_a_finite_number_is_refused_by_name(option, value):
    with pytest.raises(ValueError, match=f"numeric verifier 'n': {option} must be a finite number >= 0"):
        NumericVerifier("n", **{option: value})


@pytest.mark.parametrize(
    "gold, wrong, right",
    [
        (r"e^{-50}", ["0.0", r"10^{-100}", r"e^{-60}"], [r"e^{-50}", r"\frac{1}{e^{50}}"]),
        (r"\frac{1}{2^{70}}", ["0.0", r"10^{-30}"], [r"2^{-70}"]),
        (r"\sqrt{2} \cdot 10^{-8}", ["0.00000001", "0.0"], [r"\frac{\sqrt{2}}{10^{8}}"]),
        (r"x = e^{-50}", ["x = 0.0"], [r"x = e^{-50}"]),
        (r"(e^{-50}, 1)", ["(0.0, 1)"], [r"(e^{-50}, 1)"]),
        (r"\{e^{-50}, 1\}", [r"\{1, 0.0\}"], [r"\{1, e^{-50}\}"]),
        (r"(-\infty, e^{-50})", [r"(-\infty, 0.0)"], [r"(-\infty, e^{-50})"]),
        (r"\sqrt{2}", ["1.41421", "1.4142"], ["1.4142135", r"2^{1/2}"]),  # 1.41421: 2.6e-6 relatively
    ],
)
def test_a_tiny_constant_is_not_matched_by_any_other_tiny_number(gold, wrong, right):
    v = MathVerifier("math")
    assert [_score(v, answer, gold) for answer in wrong] == [0.0] * len(wrong)
    assert [_score(v, answer, gold) for answer in right] == [1.0] * len(right)

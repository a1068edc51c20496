r"""Review of exact number comparison: a tuple's, set's or interval's decimals compare as a lone
number's do, and a mixed number too long to write back as text is not a number (it raised).

math-verify holds a decimal such as 0.333333 as the binary float just below it; compared in that
form, (0.333333, 1) missed (\frac{1}{3}, 1) although 0.333333 matches \frac{1}{3} (a difference
of exactly 10^-6 relatively, the tolerance's edge).
"""

from __future__ import annotations

import pytest

from rlxf.rewards.answers import ExactVerifier, NumericVerifier
from rlxf.rewards.extract import numeral, parse_number
from rlxf.rewards.types import RewardInput

pytest.importorskip("math_verify")

from rlxf.rewards.answers import MathVerifier  # noqa: E402


def _score(verifier, answer: str, gold: str) -> float:
    return verifier.score(RewardInput("q", f"<answer>{answer}</answer>", gold)).score


@pytest.fixture(scope="module")
def math_verifier():
    return MathVerifier("math")


@pytest.mark.parametrize(
    "answer, gold, expected",
    [
        # |1/3 - 333333/10^6| = 1/(3*10^6) = 10^-6 * 1/3: on the edge, as for a lone number
        (r"\frac{1}{3}", "0.333333", 1.0),
        (r"(\frac{1}{3}, 1)", "(0.333333, 1)", 1.0),
        ("(0.333333, 1)", r"(\frac{1}{3}, 1)", 1.0),
        (r"\{2, \frac{1}{3}\}", r"\{0.333333, 2\}", 1.0),
        (r"[\frac{1}{3}, 2]", "[0.333333, 2]", 1.0),
        (r"(\frac{1}{3}, 1, 2)", "(0.333333, 1, 2)", 1.0),
        # |1/300 - 33333/10^7| = 1/(3*10^7) > 10^-6 * 1/300 = 1/(3*10^8), not within the relative
        # tolerance, but 1/300 >= 10^-3: its six places (0.003333 both) hold three significant digits
        (r"(\frac{1}{300}, 1)", "(0.0033333, 1)", 1.0),
        (r"\{\frac{1}{300}, 1\}", r"\{0.0033333, 1\}", 1.0),
        # below 10^-3 the places hold fewer: relative again (1/3000 vs 0.00033333: 10^-5 apart)
        (r"(\frac{1}{3000}, 1)", "(0.00033333, 1)", 0.0),
    ],
)
def test_decimals_in_a_tuple_set_or_interval_compare_exactly(math_verifier, answer, gold, expected):
    assert _score(math_verifier, answer, gold) == expected


def test_a_mixed_number_too_long_to_write_back_is_not_a_number():
    # 2,500 + 2,400 digits: whole * den + 1 has 4,900, past int-to-text's 4,300 (it raised ValueError)
    too_long = "7" * 2500 + r"\frac{1}{" + "9" * 2400 + "}"
    assert numeral(too_long) is None and parse_number(too_long) is None
    assert _score(NumericVerifier("numeric"), too_long, "5") == 0.0
    # 2,000 + 2,000 digits: whole * den + 1 has at most 4,000, and is read exactly
    whole, den = "1" * 2000, "3" + "0" * 1999
    assert parse_number(whole + r"\frac{1}{" + den + "}") == int(whole) + parse_number(f"1/{den}")


def test_a_mixed_number_too_long_scores_zero_in_the_math_verifier(math_verifier):
    assert _score(math_verifier, "7" * 2500 + r"\frac{1}{" + "9" * 2400 + "}", "5") == 0.0


def test_a_reference_past_the_digit_limit_is_refused_saying_the_limit():
    # 1e4001 looks like the 1e-3 the message gave as an example of what is read
    result = NumericVerifier("numeric").score(RewardInput("q", "<answer>1</answer>", "1e4001"))
    assert result.error is not None and "'1e4001' is not a number" in result.error
    assert "at most 4,000 digits and an exponent within +-4,000" in result.error


@pytest.mark.parametrize(
    "answer, gold, expected",
    [
        # six decimal places that hold three significant digits of the reference or more: agreeing
        # to them is agreeing, as math-verify reads it (a reference rounded where it is written)
        ("0.367879", "e^{-1}", 1.0),            # 1.2e-6 apart relatively: only the places say yes
        (r"\frac{1}{300}", "0.003333", 1.0),
        ("0.003333", r"\frac{1}{300}", 1.0),
        ("7.0000001", "7", 0.0),                # an integer reference takes an integer exactly
        ("2.9999999", "3", 0.0),
        ("19.9900001", "19.99", 1.0),
        ("19.991", "19.99", 0.0),
        # below 10^-3 the places erase the reference: relative, so nothing tiny matches 0 or another
        ("0.0000014", "0.000001", 0.0),
        ("0.0", "e^{-50}", 0.0),
        ("6.626e-34", "0.0", 0.0),
        ("2^{-70}", "10^{-30}", 0.0),
    ],
)
def test_six_places_count_where_they_hold_three_significant_digits(math_verifier, answer, gold, expected):
    assert _score(math_verifier, answer, gold) == expected


@pytest.mark.parametrize("gold", ["0.5", "50"])
def test_last_number_keeps_a_percent_sign_read_both_ways(gold):
    """``It is 50%.`` scored 0 against 0.5: last_number dropped the sign the docstring reads both ways."""
    for verifier in (NumericVerifier("numeric", extract=["last_number"]), MathVerifier("math", extract=["last_number"])):
        assert verifier.score(RewardInput("q", "It is 50%.", gold)).score == 1.0


@pytest.mark.parametrize(("places", "answer", "gold"), [(2, "1225", "1234.56"), (2, "19.8", "19.99"),
                                                        (0, "4.9", "2.5"), (0, "0", "0.5")])
def test_few_decimal_places_are_no_relative_tolerance(places, answer, gold):
    """float_rounding: 2 read as a relative 10^-2 made any answer within 1% right (0: any of the sign)."""
    assert _score(MathVerifier("math", float_rounding=places), answer, gold) == 0.0


def test_the_exact_verifier_compares_last_numbers_without_their_percent_sign():
    exact = ExactVerifier("exact", extract=["last_number"])
    assert exact.score(RewardInput("q", "The discount is 50%.", "50")).score == 1.0
    assert exact.score(RewardInput("q", "The discount is 50%.", "50%")).score == 1.0

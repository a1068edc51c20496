r"""An answer is a result, not the question's computation copied out for sympy to carry out:
to a reference that is a number, ``3+4``, ``5!``, ``\binom{5}{2}``, ``48/6`` scored 1; a small
``\prod`` was refused as too large; puzzle24 took ``sqrt(9)`` and numbers it was not given."""

from __future__ import annotations

import pytest

from rlxf.rewards.answers import NumericVerifier
from rlxf.rewards.extract import numeral, parse_number
from rlxf.rewards.types import RewardInput

pytest.importorskip("math_verify")

from rlxf.rewards.answers import MathVerifier  # noqa: E402


@pytest.fixture(scope="module")
def math_v():
    return MathVerifier("math")


def _score(v, answer, truth):
    return v.score(RewardInput("q", f"\\boxed{{{answer}}}", truth))


@pytest.mark.parametrize("truth, answer", [
    ("7", "3+4"), ("120", "5!"), ("10", r"\binom{5}{2}"), ("8", "48/6"), ("8", r"\frac{48}{6}"),
    ("8", "2^3"), ("7006652", "1234*5678"), ("3", r"\sqrt{9}"), ("0.5", r"\frac{1}{2}+0"), ("3/4", r"\frac{6}{4}-\frac{3}{4}"),
    ("7", "7 = 3+4"), ("7", r"\text{3+4}"), ("1", r"\frac{7}{7}"), ("100", "4^{2}+84"), ("7", "7, 7"),
    ("120", r"\prod_{k=1}^{5} k"),            # was refused as too_large: "1}^" read as a power of 1
    ("(7, 2)", "(3+4, 2)"), ("[1, 3)", "[1, 1+2)"), (r"\{1, 2\}", r"\{3-2, 2\}"),
])
def test_a_number_is_answered_by_a_number_not_by_its_computation(math_v, truth, answer):
    r = _score(math_v, answer, truth)
    assert (r.score, r.metrics.get("unevaluated"), r.metrics.get("too_large")) == (0.0, 1.0, None)


@pytest.mark.parametrize("truth, answer", [
    ("7", "7"), ("7", "7.0"), ("7", "x = 7"), ("7", "3+4 = 7"), ("0.5", "1/2"), ("0.5", r"\frac{1}{2}"),
    ("1/2", r"\frac{2}{4}"), ("1/2", r"\dfrac12"), ("1000", "1,000"), ("1000", r"1{,}000"), ("1000", r"1\,000"),
    ("0.5", r"50\%"), ("1500", r"1.5 \times 10^{3}"), ("1500", "1.5e3"), ("7", r"7 \text{ cm}"), ("7", r"\$7"),
    ("90", r"90^\circ"), ("2.5", r"2\frac{1}{2}"), ("-7", "- 7"), ("-0.5", r"\frac{-1}{2}"), ("7", "(7)"),
    ("(7, 2)", "(7, 2)"), ("(0.5, 2)", r"\left(\frac{1}{2}, 2\right)"),
])
def test_numbers_written_as_numbers_still_score(math_v, truth, answer):
    assert _score(math_v, answer, truth).score == 1.0


@pytest.mark.parametrize("truth, answer", [
    ("x^2+1", "1+x^2"), (r"\sqrt{2}", r"2^{1/2}"), (r"\pi/2", r"\frac{\pi}{2}"), ("(x+1)^2", "x^2+2x+1"),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}"), ("2^{10}", "1024"), ("2^{10}", "2^{10}"),
])
def test_an_expression_is_still_answered_by_an_equivalent_expression(math_v, truth, answer):
    assert _score(math_v, answer, truth).score == 1.0


def test_a_small_product_is_refused_as_unevaluated_not_as_too_large(math_v):
    r = _score(math_v, r"\prod_{k=1}^{5} k + x", "x + 120")   # an expression: math-verify's parse keeps Product
    assert (r.score, r.metrics.get("unevaluated"), r.metrics.get("too_large")) == (0.0, 1.0, None)
    assert _score(math_v, r"\prod_{k=1}^{10^6} k", "5").metrics["too_large"] == 1.0   # still not computed


def test_the_numeric_verifier_takes_no_division_for_a_number():
    v = NumericVerifier("n", ["answer_tag", "last_number"])

    def score(answer, truth):
        return v.score(RewardInput("q", f"<answer>{answer}</answer>", truth)).score

    assert score("48/6", "8") == 0.0 and score(r"\frac{48}{6}", "8") == 0.0 and score("4.8/0.6", "8") == 0.0
    assert score("2/4", "0.5") == 1.0 and score("x = 8", "8") == 1.0 and score("8 apples", "8") == 1.0


@pytest.mark.parametrize("text, expected", [
    ("48/6", None), ("4.8/0.6", None), ("1/0", None), ("0/5", None), ("3+4", None), ("7 = 3+4", None), ("not 7", None),
    ("x >= 7", None), ("12,34", None), ("7 or 8", None),
    ("2/4", "2/4"), (r"-2\frac{1}{2}", "-5/2"), (r"\frac{-1}{2}", "-1/2"), (r"1.5\cdot 10^{-3}", "1.5e-3"),
    ("Answer: 1,234.5", "1234.5"), (r"\textbf{50\%}", "50%"), (r"$\$7$", "7"),
])
def test_numeral(text, expected):
    assert numeral(text) == expected


def test_numeral_is_linear_on_a_hostile_answer():
    # one word of units at a time: "aaa...a1" once backtracked through every way to split it
    assert numeral("7 " + "a" * 4000 + "1") is None and parse_number("5" + "%" * 4000) is None


def test_arithmetic_puzzles_take_only_their_numbers_and_the_four_operations():
    rg = pytest.importorskip("reasoning_gym")
    from rlxf.rewards.reasoning_gym import ReasoningGymVerifier, plays_by_the_rules  # noqa: PLC0415

    v = ReasoningGymVerifier("rg")
    puzzle = rg.create_dataset("puzzle24", size=1, seed=0)[0]
    assert puzzle["metadata"]["numbers"] == [1, 3, 5, 9]
    for hack in ("(sqrt(9)+5)*3*1", "6*4+1-1", "(9+5+3+1)**1", "-(1-3)*(9+3)"):   # the scorer gave 1.0 to the first two
        r = v.score(RewardInput("q", f"<answer>{hack}</answer>", puzzle))
        assert (r.score, r.metrics.get("disallowed")) == (0.0, 1.0), hack
    assert v.score(RewardInput("q", "<answer>1*3*5 + 9</answer>", puzzle)).score == 1.0
    countdown = rg.create_dataset("countdown", size=1, seed=0)[0]
    expression = countdown["metadata"]["expression"]
    hacked = v.score(RewardInput("q", f"<answer>sqrt(({expression})**2)</answer>", countdown))
    assert (hacked.score, hacked.metrics.get("disallowed")) == (0.0, 1.0)
    assert v.score(RewardInput("q", f"<answer>{expression}</answer>", countdown)).score == 1.0
    assert plays_by_the_rules("(1 + 2) * 3 / 4 - -5", None)
    assert not plays_by_the_rules("1 + 2 + 3", [1, 2, 2])   # each given number once, no other
    assert not plays_by_the_rules("1.5 * 16", None) and not plays_by_the_rules("9 % 5", None)


def test_a_power_of_ten_is_scientific_notation_not_a_computation():
    assert (numeral("10^6"), numeral("10^{-3}"), numeral("-10^{2}")) == ("1e6", "1e-3", "-1e2")
    # any other power is still the computation: 2^3, 100^2, and a power of ten plus more
    assert [numeral(a) for a in ("2^3", "100^2", "10^6 + 1", "10^{6.5}")] == [None] * 4

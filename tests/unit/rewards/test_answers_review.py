"""A number's sign however it is typeset, and one rule for a percentage in both number checkers,
whichever extraction found it."""

import pytest

from rlxf.rewards.answers import MathVerifier, NumericVerifier
from rlxf.rewards.extract import last_number
from rlxf.rewards.types import RewardInput

pytest.importorskip("math_verify")


@pytest.fixture(scope="module")
def checkers():
    return MathVerifier("m"), NumericVerifier("n")


@pytest.mark.parametrize("minus", ["\u2212", "\uff0d", "\ufe63"])
def test_a_typeset_minus_sign_is_never_dropped(checkers, minus):
    assert last_number(f"so x = {minus}5") == "-5"
    for checker in checkers:
        assert checker.score(RewardInput("q", f"The answer is {minus}5", "5")).score == 0.0
        assert checker.score(RewardInput("q", f"The answer is {minus}5", "-5")).score == 1.0


@pytest.mark.parametrize("reference, answer, expected", [
    ("50", r"\boxed{50\%}", 1.0),         # what a "what percent?" question's reference means
    ("50", "The answer is 50%.", 1.0),    # the same answer, found as the last number
    ("12.5", r"\boxed{12.5\%}", 1.0),     # not for an integer only
    ("0.125", r"\boxed{12.5\%}", 1.0),    # its value
    (r"12.5\%", r"\boxed{12.5}", 1.0),
    (r"12.5\%", r"\boxed{0.125}", 1.0),
    (r"12.5\%", r"\boxed{1250\%}", 0.0),  # two percentages compare as written
    ("12", r"\boxed{12.5\%}", 0.0),
])
def test_a_percentage_reads_the_same_in_both_checkers(checkers, reference, answer, expected):
    for checker in checkers:
        assert checker.score(RewardInput("q", answer, reference)).score == expected, checker.name

"""Digits written in other Unicode forms read alike in every answer checker (``fold_unicode``):
full-width "４２" passed the numeric verifier (Python's int() reads any decimal digit) but not
the math verifier (math-verify cannot parse it), nor the exact one."""

from __future__ import annotations

import pytest

from rlxf.rewards.answers import ExactVerifier, NumericVerifier
from rlxf.rewards.extract import fold_unicode, last_number, numeral
from rlxf.rewards.types import RewardInput

pytest.importorskip("math_verify")

from rlxf.rewards.answers import MathVerifier  # noqa: E402

FORTY_TWO = {
    "full-width": "\uff14\uff12",
    "Arabic-Indic": "\u0664\u0662",
    "Extended Arabic-Indic": "\u06f4\u06f2",
    "Devanagari": "\u096a\u0968",
    "mathematical bold": "\U0001d7d2\U0001d7d0",
}
VERIFIERS = [NumericVerifier("numeric"), ExactVerifier("exact"), MathVerifier("math")]


@pytest.mark.parametrize("form", FORTY_TWO)
@pytest.mark.parametrize("verifier", VERIFIERS, ids=lambda v: v.name)
def test_every_verifier_reads_digits_in_any_script_as_the_same_number(verifier, form):
    digits = FORTY_TWO[form]

    def score(answer, gold):
        return verifier.score(RewardInput("q", f"<answer>{answer}</answer>", gold)).score

    assert (score(digits, "42"), score("42", digits), score("\u2212" + digits, "-42")) == (1.0, 1.0, 1.0)
    assert score(digits, "43") == 0.0


def test_folding_touches_digits_full_width_ascii_and_minus_signs_only():
    assert fold_unicode("\uff0d\uff11\uff12\uff0e\uff15\uff05") == "-12.5%"
    assert fold_unicode("x\u00b2 \u00bd \u0410") == "x\u00b2 \u00bd \u0410"  # ², ½, Cyrillic A: as they are
    assert numeral("10\u00b2") is None  # NFKC would make it 102
    assert last_number("\uff11\uff0c\uff12\uff15\uff10 pears") == "1250"


def test_a_superscript_is_not_read_as_a_digit():
    assert NumericVerifier("numeric").score(RewardInput("q", "<answer>10\u00b2</answer>", "102")).score == 0.0

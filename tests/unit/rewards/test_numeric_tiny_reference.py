"""The numeric verifier's default tolerance does not accept 0 for a tiny reference."""

from __future__ import annotations

from rlxf.rewards.answers import NumericVerifier
from rlxf.rewards.types import RewardInput


def _score(verifier: NumericVerifier, answer: str, gold: str) -> float:
    return verifier.score(RewardInput(prompt="q", response=f"<answer>{answer}</answer>", ground_truth=gold)).score


def test_zero_is_not_plancks_constant():
    v = NumericVerifier("numeric")
    assert _score(v, "0", "6.626e-34") == 0.0
    assert _score(v, "1e-30", "6.626e-34") == 0.0
    assert _score(v, "6.626e-34", "6.626e-34") == 1.0
    assert _score(v, "0.0", "0") == 1.0 and _score(v, "-0", "0") == 1.0
    assert _score(NumericVerifier("numeric", abs_tol=1e-3), "0.0004", "0") == 1.0   # asked for: rounding near 0

"""Format rewards and the DAPO soft overlong penalty (values derived by hand)."""

import pytest

from rlxf.rewards.format import FormatVerifier, OverlongVerifier, soft_overlong_penalty
from rlxf.rewards.types import RewardInput


def r(text, tokens=None, max_new=None):
    return RewardInput("p", text, response_tokens=tokens, max_new_tokens=max_new)


@pytest.mark.parametrize("text, ok", [
    ("<think>a</think><answer>b</answer>", True),
    ("intro <think>\nlong\n</think>\n<answer> 4 </answer> outro", True),
    ("<answer>b</answer><think>a</think>", False),           # wrong order
    ("<think>a</think>", False),                              # missing answer
    ("<think>a</think><answer>b</answer><answer>c</answer>", False),  # twice
    ("<think>a<answer>b</answer></think>", False),           # answer inside think
    ("<think>a</think><answer>b", False),                     # unclosed
])
def test_required_tags(text, ok):
    v = FormatVerifier("format", required_tags=["think", "answer"])
    assert v.score(r(text)).score == (1.0 if ok else 0.0)


def test_pattern_search_and_full():
    search = FormatVerifier("f", pattern=r"\d+")
    assert search.score(r("the answer is 12.")).score == 1.0
    assert search.score(r("no digits")).score == 0.0
    full = FormatVerifier("f", pattern=r"<answer>\d+</answer>", match="full")
    assert full.score(r("  <answer>12</answer>\n")).score == 1.0
    assert full.score(r("so <answer>12</answer>")).score == 0.0


def test_pattern_and_tags_both_required():
    v = FormatVerifier("f", pattern=r"^<think>", required_tags=["think", "answer"])
    assert v.score(r("<think>x</think><answer>1</answer>")).score == 1.0
    assert v.score(r(" <think>x</think><answer>1</answer>")).score == 0.0


def test_bad_format_config_is_rejected():
    with pytest.raises(ValueError, match="pattern or required_tags"):
        FormatVerifier("f")
    with pytest.raises(ValueError, match="not a valid regex"):
        FormatVerifier("f", pattern="(")


# L_max = 100, buffer 25 (fraction 0.25), p = 1:
#   |y| <= 75 -> 0;  |y| = 80 -> (75 - 80) / 25 = -0.2;  |y| = 100 -> -1;  |y| > 100 -> -1
@pytest.mark.parametrize("length, expected", [(0, 0.0), (75, 0.0), (80, -0.2), (90, -0.6), (100, -1.0), (130, -1.0)])
def test_overlong_penalty_values(length, expected):
    assert soft_overlong_penalty(length, 100, 25, 1.0) == pytest.approx(expected, abs=1e-6)
    v = OverlongVerifier("overlong", buffer_fraction=0.25, penalty=1.0)
    res = v.score(r("x", tokens=length, max_new=100))
    assert res.score == pytest.approx(expected, abs=1e-6)
    assert res.metrics["overlong"] == float(length > 75)


def test_overlong_penalty_scale_and_fixed_limit():
    v = OverlongVerifier("o", buffer_fraction=0.5, penalty=2.0, max_tokens=40)  # ramp over (20, 40]
    assert v.score(r("x", tokens=30, max_new=999)).score == pytest.approx(-1.0)  # (20-30)/20*2


def test_overlong_without_lengths_is_an_error():
    res = OverlongVerifier("o").score(r("x"))
    assert res.error is not None and "length" in res.error

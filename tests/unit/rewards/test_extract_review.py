"""The answer is what a response says after its reasoning: a guess inside <think> is not it."""

import pytest

from rlxf.rewards.answers import ExactVerifier, NumericVerifier
from rlxf.rewards.extract import after_reasoning, extract_answer
from rlxf.rewards.types import RewardInput


@pytest.mark.parametrize("text, expected", [
    ("<think>a</think> b", " b"),
    ("started in the prompt </think> b", " b"),        # a template that opens <think> itself
    ("<think>one</think> x <think>two</think> y", " y"),
    ("<think>cut off mid-thought, maybe 7", ""),
    ("no reasoning tags: 7", "no reasoning tags: 7"),
])
def test_after_reasoning(text, expected):
    assert after_reasoning(text) == expected


@pytest.mark.parametrize("response, found", [
    (r"<think>is it \boxed{7}?</think> No: it is 8.", ("8", "last_number")),
    ("<think>try <answer>7</answer></think> so 8", ("8", "last_number")),
    ("<think>I think 7", None),                         # truncated while thinking: no answer
    ("<think>7?</think><answer>8</answer>", ("8", "answer_tag")),
])
def test_extraction_skips_the_reasoning(response, found):
    assert extract_answer(response, ["answer_tag", "boxed", "last_number"]) == found


def test_verifiers_do_not_reward_a_guess_made_while_thinking():
    numeric = NumericVerifier("n")
    assert numeric.score(RewardInput("q", r"<think>\boxed{7}</think> so 8", "7")).score == 0.0
    assert numeric.score(RewardInput("q", "<think>7, I think</think>", "7")).metrics["extracted"] == 0.0
    exact = ExactVerifier("e", ["full"])
    assert exact.score(RewardInput("q", "<think>Paris?</think>\nParis", "paris")).score == 1.0


def test_reasoning_gym_scores_what_follows_the_reasoning():
    reasoning_gym = pytest.importorskip("reasoning_gym")
    from rlxf.data.tasks import get_task
    from rlxf.rewards.reasoning_gym import ReasoningGymVerifier

    entry = reasoning_gym.create_dataset("chain_sum", size=1, seed=0)[0]
    right, wrong = entry["answer"], str(int(entry["answer"]) + 1)
    task = get_task("reasoning_gym:chain_sum", {})
    for response, expected in [(f"<think><answer>{right}</answer></think><answer>{wrong}</answer>", 0.0),
                               (f"<think><answer>{right}</answer></think>{wrong}", 0.0),
                               (f"<think><answer>{right}</answer>", 0.0),
                               (f"<think>{wrong}?</think> {right}", 1.0)]:
        assert ReasoningGymVerifier("rg").score(RewardInput("", response, entry)).score == expected, response
        assert task.score(response, entry, {}) == expected, response

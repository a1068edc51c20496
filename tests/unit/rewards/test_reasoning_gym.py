"""The reasoning-gym verifier uses each dataset's own scorer on real entries."""

import pytest

pytest.importorskip("reasoning_gym")
import reasoning_gym  # noqa: E402

from rlxf.rewards.reasoning_gym import ReasoningGymVerifier  # noqa: E402
from rlxf.rewards.types import RewardInput  # noqa: E402


@pytest.fixture(scope="module")
def verifier():
    return ReasoningGymVerifier("rg")


@pytest.mark.parametrize("name", ["basic_arithmetic", "chain_sum", "letter_counting"])
def test_right_and_wrong_answers(verifier, name):
    entry = reasoning_gym.create_dataset(name, size=3, seed=11)[1]
    right = verifier.score(RewardInput(entry["question"], f"thinking <answer>{entry['answer']}</answer>", entry))
    wrong = verifier.score(RewardInput(entry["question"], "<answer>definitely not it</answer>", entry))
    assert (right.score, right.metrics["correct"], right.error) == (1.0, 1.0, None)
    assert (wrong.score, wrong.metrics["correct"], wrong.error) == (0.0, 0.0, None)


def test_no_answer_tag_scores_zero(verifier):
    entry = reasoning_gym.create_dataset("chain_sum", size=1, seed=0)[0]
    res = verifier.score(RewardInput("", entry["answer"], entry))  # right text but not in <answer>
    assert (res.score, res.metrics["extracted"]) == (0.0, 0.0)
    whole = ReasoningGymVerifier("rg", answer_tag=None)
    assert whole.score(RewardInput("", f"  {entry['answer']} ", entry)).score == 1.0


def test_dataset_from_task_metadata_when_the_entry_lacks_it(verifier):
    entry = reasoning_gym.create_dataset("chain_sum", size=1, seed=0)[0]
    bare = {"question": entry["question"], "answer": entry["answer"], "metadata": {}}
    x = RewardInput("", f"<answer>{entry['answer']}</answer>", bare, metadata={"task": "reasoning_gym:chain_sum"})
    assert verifier.score(x).score == 1.0
    unknown = verifier.score(RewardInput("", "<answer>1</answer>", bare))
    assert unknown.error is not None and "which reasoning-gym dataset" in unknown.error


def test_not_an_entry_is_an_error(verifier):
    res = verifier.score(RewardInput("", "<answer>4</answer>", "4"))
    assert res.error is not None and "reasoning-gym entry" in res.error

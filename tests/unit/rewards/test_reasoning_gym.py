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


def test_untagged_answers_score_the_whole_response_unless_a_tag_is_required(verifier):
    entry = reasoning_gym.create_dataset("chain_sum", size=1, seed=0)[0]
    bare = RewardInput("", f"  {entry['answer']} ", entry)  # right text, no <answer> tag
    res = verifier.score(bare)
    assert (res.score, res.metrics["tagged"]) == (1.0, 0.0)
    strict = ReasoningGymVerifier("rg", require_tag=True).score(bare)
    assert (strict.score, strict.metrics["tagged"]) == (0.0, 0.0)
    assert ReasoningGymVerifier("rg", answer_tag=None).score(bare).score == 1.0


def test_agrees_with_the_data_tasks_own_scorer(verifier):
    """Rewards and task accuracy must not disagree: compare with rlxf.data's scorer."""
    get_task = pytest.importorskip("rlxf.data.tasks").get_task
    task = get_task("reasoning_gym:basic_arithmetic", {})
    _, test = task.splits(train_size=4, test_size=4, seed=3)
    for item in test:
        for response in (f"<answer>{item.answer}</answer>", item.answer, "<answer>0.5</answer>", "no idea"):
            x = RewardInput(item.question, response, item.ground_truth,
                            {"task": task.name, "task_options": task.options})
            assert verifier.score(x).score == task.score(response, item.ground_truth, {}), response


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

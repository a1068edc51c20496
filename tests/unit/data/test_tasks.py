"""Procedural tasks: hand-checked arithmetic, difficulty options, disjoint splits, scorers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.data import DataError, get_task, task_names
from rlxf.data.tasks import check_disjoint
from rlxf.data.tasks.arithmetic import count_carries, evaluate, last_integer


@pytest.mark.parametrize("operands,ops,want", [
    ([12, 345], ["+"], 357),
    ([7, 9], ["-"], -2),
    ([2, 3, 4], ["+", "*"], 14),      # 2 + 12, not 20
    ([2, 3, 4], ["*", "-"], 2),       # 6 - 4
    ([10, 2, 3, 4], ["-", "*", "+"], 8),  # 10 - 6 + 4
    ([5, 5, 5], ["*", "*"], 125),
])
def test_evaluate_precedence(operands, ops, want):
    assert evaluate(operands, ops) == want


def test_last_integer():
    assert last_integer("12+345=357") == 357
    assert last_integer("The answer is -42.") == -42
    assert last_integer("so 1,234 total") == 1234
    assert last_integer("no digits") is None


def test_arithmetic_items_follow_the_options():
    task = get_task("arithmetic", {"min_digits": 2, "max_digits": 3, "ops": "-*", "num_operands": [3, 4],
                                   "format": "question", "allow_negative": False})
    train, test = task.splits(300, 50, seed=7)
    assert len(train) == 300 and len(test) == 50
    for item in train + test:
        m = item.metadata
        assert 3 <= len(m["operands"]) <= 4 and all(10 <= x <= 999 for x in m["operands"])
        assert set(m["ops"]) <= {"-", "*"}
        assert item.question.startswith("What is ") and item.question.endswith("?")
        assert int(item.answer) == evaluate(m["operands"], m["ops"]) >= 0
    assert {op for item in train for op in item.metadata["ops"]} == {"-", "*"}


def test_compact_format_and_custom_format():
    (item,), _ = get_task("arithmetic", {}).splits(1, 1, seed=0)
    assert item.question == item.metadata["expression"] + "="
    (item,), _ = get_task("arithmetic", {"format": "Q: {spaced} ="}).splits(1, 1, seed=0)
    (a, b), (op,) = item.metadata["operands"], item.metadata["ops"]
    assert item.question == f"Q: {a} {op} {b} ="


def test_same_seed_same_items_other_seed_differs():
    task = get_task("arithmetic", {})
    a, b, c = task.splits(50, 10, 1), task.splits(50, 10, 1), task.splits(50, 10, 2)
    assert [i.question for i in a[0]] == [i.question for i in b[0]]
    assert [i.question for i in a[0]] != [i.question for i in c[0]]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), max_digits=st.integers(1, 2), ops=st.sampled_from(["+", "+-", "+-*"]))
def test_property_arithmetic_splits_are_disjoint(seed, max_digits, ops):
    """Even in tiny problem spaces (1-digit sums: 100 problems) no test question is trained on."""
    task = get_task("arithmetic", {"max_digits": max_digits, "ops": ops})
    train, test = task.splits(200, 30, seed)
    held_out = {t.question for t in test}
    assert len(held_out) == 30
    assert not any(t.question in held_out for t in train)


def test_too_small_problem_space_is_an_error():
    task = get_task("arithmetic", {"max_digits": 1, "ops": "+"})  # 100 distinct problems
    with pytest.raises(DataError, match="only 100 distinct problems"):
        task.splits(10, 150, seed=0)


def test_arithmetic_score():
    task = get_task("arithmetic", {})
    assert task.score("357", "357", {}) == 1.0
    assert task.score("12+345=357", "357", {}) == 1.0
    assert task.score("356", "357", {}) == 0.0
    assert task.score("", "357", {}) == 0.0


@pytest.mark.parametrize("options,match", [
    ({"max_digit": 3}, "max_digit.*Valid options: min_digits, max_digits"),
    ({"ops": "+/"}, "ops must be"),
    ({"min_digits": 4, "max_digits": 2}, "min_digits=4 > max_digits=2"),
    ({"num_operands": 1}, "num_operands"),
    ({"format": "no placeholder"}, "format"),
    ({"ops": "+-", "carries": [0, 1]}, "needs ops '\\+'"),
    ({"ops": "+", "carries": [2, 1]}, "carries must be"),
    ({"ops": "-", "zero_pad": True}, "allow_negative: false"),
])
def test_bad_arithmetic_options(options, match):
    with pytest.raises(DataError, match=match):
        get_task("arithmetic", options)


def test_unknown_task_lists_valid_ones():
    with pytest.raises(DataError, match="valid tasks: arithmetic, guess_number, reasoning_gym:<dataset>"):
        get_task("arithmetics")
    assert "arithmetic" in task_names()


def test_check_disjoint_catches_a_leak():
    from rlxf.data import TaskItem

    with pytest.raises(DataError, match="1 training questions are also test questions"):
        check_disjoint([TaskItem("1+1=", "2"), TaskItem("2+2=", "4")], [TaskItem("2+2=", "4")], "t")


# --- reasoning-gym ---------------------------------------------------------------------------

def test_reasoning_gym_seeds_are_shifted_copies():
    """Why seeds cannot separate splits: seed 2 is seed 1 shifted by one item."""
    import reasoning_gym

    a = reasoning_gym.create_dataset("leg_counting", seed=1, size=6)
    b = reasoning_gym.create_dataset("leg_counting", seed=2, size=6)
    assert [a[i + 1]["question"] for i in range(5)] == [b[i]["question"] for i in range(5)]


def test_reasoning_gym_splits_disjoint_and_scored_by_its_own_scorer():
    task = get_task("reasoning_gym:leg_counting", {"min_animals": 1, "max_animals": 2})
    train, test = task.splits(200, 40, seed=3)
    held_out = {t.question for t in test}
    assert len(train) == 200 and not any(t.question in held_out for t in train)
    item = test[0]
    assert item.ground_truth["answer"] == item.answer and item.ground_truth["question"] == item.question
    assert task.score(f"<answer>{item.answer}</answer>", item.ground_truth, {}) == 1.0
    assert task.score(item.answer, item.ground_truth, {}) == 1.0
    assert task.score("<answer>-1</answer>", item.ground_truth, {}) == 0.0
    assert task.name == "reasoning_gym:leg_counting" and task.options == {"min_animals": 1, "max_animals": 2}


def test_reasoning_gym_small_space_removes_test_questions_from_train():
    """basic_arithmetic with 1-digit, 2-term problems repeats questions across seeds."""
    task = get_task("reasoning_gym:basic_arithmetic",
                    {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    train, test = task.splits(400, 100, seed=0)
    held_out = {t.question for t in test}
    assert len(train) == 400 and not any(t.question in held_out for t in train)
    # The plain seed-offset stream *does* contain test questions: the removal was needed.
    import reasoning_gym

    raw = reasoning_gym.create_dataset("basic_arithmetic", seed=100, size=400, min_terms=2, max_terms=2,
                                       min_digits=1, max_digits=1)
    assert any(raw[i]["question"] in held_out for i in range(400))


def test_reasoning_gym_bad_names_and_options():
    with pytest.raises(DataError, match="unknown reasoning-gym dataset 'leg_countin'.*leg_counting"):
        get_task("reasoning_gym:leg_countin")
    with pytest.raises(DataError, match=r"\['seed'\] are set by rlxf"):
        get_task("reasoning_gym:leg_counting", {"seed": 3})
    with pytest.raises(DataError, match="rejects data.task_options"):
        get_task("reasoning_gym:leg_counting", {"no_such_option": 1})


@pytest.mark.parametrize("operands,want", [
    ([123, 456], 0),          # 3+6, 2+5, 1+4: no column reaches 10
    ([195, 5], 2),            # 5+5=10 carry, 9+0+1=10 carry, 1+0+1=2
    ([999, 1], 3),            # every column carries
    ([672, 461], 2),          # 2+1=3, 7+6=13 carry, 6+4+1=11 carry
    ([55, 55, 55], 2),        # 15 carry 1, 5*3+1=16 carry 1
])
def test_count_carries_by_hand(operands, want):
    assert count_carries(operands) == want


def test_carries_and_zero_padding():
    hard = get_task("arithmetic", {"min_digits": 3, "max_digits": 3, "ops": "+", "zero_pad": True,
                                   "carries": [2, 3]})
    easy = get_task("arithmetic", {"min_digits": 1, "max_digits": 3, "ops": "+", "zero_pad": True,
                                   "carries": [0, 1]})
    train, test = hard.splits(200, 50, seed=0)
    for item in train + test:
        a, b = item.metadata["operands"]
        assert count_carries([a, b]) >= 2
        assert item.question == f"{a:03d}+{b:03d}=" and item.answer == f"{a + b:04d}"
    etrain, _ = easy.splits(200, 10, seed=0)
    assert all(count_carries(i.metadata["operands"]) <= 1 for i in etrain)
    assert {i.question for i in etrain}.isdisjoint({i.question for i in test})  # easy demos never show a hard test problem
    assert hard.score("1133", "1133", {}) == 1.0 and hard.score("133", "1133", {}) == 0.0

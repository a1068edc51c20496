"""A reasoning-gym reference that sympy left unevaluated is no reference (found by an outside review).

intermediate_integration builds ``cos`` and ``sin`` in its polynomial-times-trig items as undefined
functions, so ``sympy.integrate`` returns them as ``Integral(...)``: the answer
``3*Integral(x**3*cos(3*x), x) + C`` restated the question and scored 1.0, and the task gave it to
SFT as the response to learn.
"""

from __future__ import annotations

import logging

import pytest

rg = pytest.importorskip("reasoning_gym")

from rlxf.data.tasks import get_task  # noqa: E402
from rlxf.rewards.reasoning_gym import ReasoningGymVerifier, unevaluated_operator  # noqa: E402
from rlxf.rewards.types import RewardInput  # noqa: E402

# item 5 of seed 0 (= item 0 of seed 5) of intermediate_integration, as reasoning-gym 0.1.25 makes it
ENTRY = {"question": "Find the indefinite integral: ∫ 3*x**3*cos(3*x) dx",
         "answer": "3*Integral(x**3*cos(3*x), x) + C",
         "metadata": {"source_dataset": "intermediate_integration", "integrand": "3*x**3*cos(3*x)",
                      "variable": "x"}}
# by parts three times; d/dx = 3x^2 sin3x + 3x^3 cos3x + 2x cos3x - 3x^2 sin3x
#                              - (2/3) sin3x - 2x cos3x + (2/3) sin3x = 3x^3 cos3x
SOLVED = "x**3*sin(3*x) + x**2*cos(3*x) - 2*x*sin(3*x)/3 - 2*cos(3*x)/9 + C"


def _score(answer: str) -> tuple[float, dict]:
    r = ReasoningGymVerifier("rg").score(RewardInput(ENTRY["question"], f"<answer>{answer}</answer>", ENTRY))
    return r.score, r.metrics


@pytest.mark.parametrize("answer", [ENTRY["answer"], "Integral(3*x**3*cos(3*x), x)",
                                    "Derivative(Integral(3*x**3*cos(3*x), x), x, 0) + C"])
def test_restating_the_integral_scores_zero_even_when_the_reference_does(answer):
    score, metrics = _score(answer)
    assert score == 0.0 and (metrics.get("unevaluated") or metrics.get("unsafe")) == 1.0


def test_the_solved_integral_still_scores_where_the_reference_is_unevaluated():
    assert _score(SOLVED) == (1.0, {"tagged": 1.0, "correct": 1.0})


@pytest.mark.parametrize("text, op", [("3*Integral(x, x) + C", "Integral"), ("Sum(k, (k, 1, 9))", "Sum"),
                                      ("Limit(1/x, x, oo)", "Limit"), ("x**2/2 + C", None), ("not python", None)])
def test_unevaluated_operator(text, op):
    assert unevaluated_operator(text) == op


def test_the_task_leaves_out_items_with_unevaluated_references_and_keeps_its_sizes(caplog):
    # seed 5's first item is ENTRY; seeds 6 and 7 are solved (2*exp(x)*cos(x), asin(3*x))
    task = get_task("reasoning_gym:intermediate_integration", {})
    with caplog.at_level(logging.WARNING, logger="rlxf.data"):
        train, test = task.splits(train_size=1, test_size=1, seed=5)
    assert [t.ground_truth["metadata"]["integrand"] for t in test] == ["2*exp(x)*cos(x)"]
    assert [t.ground_truth["metadata"]["integrand"] for t in train] == ["asin(3*x)"]
    assert "Integral" not in test[0].answer + train[0].answer
    assert "left out 1 items whose reference answer sympy left unevaluated" in caplog.text

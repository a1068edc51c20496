"""Answers that get reward without solving, found by an adversarial review: the question's own
computation restated as the answer (a sum, integral, limit or derivative the verifier then
carries out for the policy), and format tags with nothing in them."""

from __future__ import annotations

import threading
import time

import pytest

from rlxf.rewards.format import FormatVerifier
from rlxf.rewards.types import RewardInput

pytest.importorskip("math_verify")

from rlxf.rewards.answers import MathVerifier  # noqa: E402


@pytest.mark.parametrize("gold, restated, value", [
    ("5050", r"\sum_{k=1}^{100} k", "5050"),
    (r"\frac{1}{3}", r"\int_0^1 x^2 \, dx", r"\frac{1}{3}"),
    ("1", r"\lim_{x \to 0} \frac{\sin x}{x}", "1"),
    ("6x", r"\frac{d}{dx} 3x^2", "6x"),
    (r"\frac{\pi^2}{6}", r"\sum_{n=1}^{\infty} \frac{1}{n^2}", r"\frac{\pi^{2}}{6}"),
])
def test_an_answer_that_restates_the_computation_scores_zero(gold, restated, value):
    v = MathVerifier("math")
    hack = v.score(RewardInput("compute it", f"\\boxed{{{restated}}}", gold))
    assert (hack.score, hack.metrics.get("unevaluated")) == (0.0, 1.0)
    assert v.score(RewardInput("compute it", f"\\boxed{{{value}}}", gold)).score == 1.0
    # the computation with its result after "=" is an answer (math-verify reads the right side);
    # the result first, the computation after it, is the computation again
    assert v.score(RewardInput("compute it", f"\\boxed{{{restated} = {value}}}", gold)).score == 1.0
    assert v.score(RewardInput("compute it", f"\\boxed{{{value} = {restated}}}", gold)).score == 0.0
    # a reference written as the computation is matched by the same computation
    assert v.score(RewardInput("write it as an integral", r"\boxed{\int_0^1 x^2 dx}", r"\int_0^1 x^2 dx")).score == 1.0


def test_a_sum_of_a_hundred_million_terms_is_not_computed_off_the_main_thread():
    # with reward.workers = 0 verifiers run on a thread, where math-verify has no timeout: this
    # sum kept an abandoned thread of the trainer busy for hours
    v = MathVerifier("math")
    out = []
    thread = threading.Thread(target=lambda: out.append(v.score(RewardInput(
        "q", r"\boxed{\sum_{k=1}^{100000000} \sin(k)}", "3"))), daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(30)
    assert out and out[0].score == 0.0 and time.monotonic() - start < 30


@pytest.mark.parametrize("text", ["<think></think><answer>4</answer>", "<think>2+2</think><answer> \n</answer>",
                                  "<think> </think><answer></answer>"])
def test_a_required_tag_with_nothing_in_it_fails_the_format(text):
    v = FormatVerifier("format", required_tags=["think", "answer"])
    assert v.score(RewardInput("p", text)).score == 0.0
    assert v.score(RewardInput("p", "<think>2+2</think><answer>4</answer>")).score == 1.0


def test_an_integration_answer_that_restates_the_integrand_scores_zero():
    rg = pytest.importorskip("reasoning_gym")
    from rlxf.rewards.reasoning_gym import ReasoningGymVerifier  # noqa: PLC0415

    v = ReasoningGymVerifier("rg")
    for name in ("simple_integration", "intermediate_integration"):
        dataset = rg.create_dataset(name, size=40, seed=5)
        entries = [dataset[i] for i in range(40) if "Integral" not in dataset[i]["answer"]][:3]
        for entry in entries:
            meta = entry["metadata"]
            hack = f"<answer>Integral({meta['integrand']}, {meta['variable']})</answer>"
            r = v.score(RewardInput(entry["question"], hack, entry))
            assert (r.score, r.metrics.get("unevaluated")) == (0.0, 1.0), (name, hack)
            assert v.score(RewardInput(entry["question"], f"<answer>{entry['answer']}</answer>", entry)).score == 1.0

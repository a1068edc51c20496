"""math / exact / numeric verifiers on hand-written right and wrong answers."""

import json
import subprocess
import sys

import pytest

from rlxf.rewards.answers import ExactVerifier, MathVerifier, NumericVerifier
from rlxf.rewards.types import RewardInput


def sample(response, truth):
    return RewardInput(prompt="What is it?", response=response, ground_truth=truth)


@pytest.fixture(scope="module")
def math_v():
    return MathVerifier("math", ["answer_tag", "boxed", "last_number"])


@pytest.mark.parametrize("response, truth", [
    ("<answer>42</answer>", "42"),
    (r"the answer is \boxed{\frac{1}{2}}", "0.5"),
    (r"<answer>\frac{2}{4}</answer>", "1/2"),
    ("<answer>x^2 + 2x + 1</answer>", "(x+1)^2"),
    (r"<answer>\{3, 1, 2\}</answer>", r"\{1,2,3\}"),
    ("<answer>1,000</answer>", "1000"),
    (r"<answer>\sqrt{2}/2</answer>", r"\frac{\sqrt{2}}{2}"),
    ("after some work we get 17", "17"),
])
def test_math_right(math_v, response, truth):
    r = math_v.score(sample(response, truth))
    assert (r.score, r.error, r.metrics["correct"]) == (1.0, None, 1.0)


@pytest.mark.parametrize("response, truth", [
    ("<answer>41</answer>", "42"),
    (r"\boxed{\frac{1}{3}}", "0.5"),
    ("<answer>x^2 + 1</answer>", "(x+1)^2"),
    ("<answer>-42</answer>", "42"),
    ("<answer>forty-two</answer>", "42"),
])
def test_math_wrong(math_v, response, truth):
    r = math_v.score(sample(response, truth))
    assert (r.score, r.error, r.metrics["correct"]) == (0.0, None, 0.0)


def test_math_without_an_answer_scores_zero_not_error(math_v):
    r = math_v.score(sample("I do not know", "42"))
    assert (r.score, r.error, r.metrics) == (0.0, None, {"extracted": 0.0, "correct": 0.0})


def test_math_missing_ground_truth_is_an_error(math_v):
    for truth in (None, "", "   "):
        r = math_v.score(sample("<answer>1</answer>", truth))
        assert r.error is not None and "ground truth" in r.error


def test_math_reads_the_answer_of_a_dict_ground_truth(math_v):
    r = math_v.score(sample("<answer>-4</answer>", {"question": "5-3-6", "answer": "-4", "metadata": {}}))
    assert r.score == 1.0


def test_math_extraction_order_matters():
    only_boxed = MathVerifier("m", ["boxed"])
    text = r"<answer>3</answer> \boxed{4}"
    assert only_boxed.score(sample(text, "4")).score == 1.0
    assert MathVerifier("m", ["answer_tag", "boxed"]).score(sample(text, "4")).score == 0.0


def test_exact_normalises_case_and_whitespace():
    v = ExactVerifier("exact")
    assert v.score(sample("<answer>  Paris\n</answer>", "paris")).score == 1.0
    assert v.score(sample("<answer>New   York</answer>", "new york")).score == 1.0
    assert v.score(sample("<answer>Lyon</answer>", "Paris")).score == 0.0
    strict = ExactVerifier("exact", case_sensitive=True)
    assert strict.score(sample("<answer>paris</answer>", "Paris")).score == 0.0
    assert ExactVerifier("e", ["last_line"]).score(sample("thinking...\nParis", "paris")).score == 1.0


def test_numeric_tolerances():
    v = NumericVerifier("numeric", rel_tol=1e-3, abs_tol=0.0)
    assert v.score(sample("<answer>3.1416</answer>", "3.14159")).score == 1.0
    assert v.score(sample("<answer>3.15</answer>", "3.14159")).score == 0.0
    assert v.score(sample(r"<answer>\frac{1}{4}</answer>", "0.25")).score == 1.0
    assert v.score(sample("<answer>a quarter</answer>", "0.25")).score == 0.0
    assert v.score(sample("the result: 1,024", "1024")).score == 1.0
    bad = v.score(sample("<answer>3</answer>", "three"))
    assert bad.error is not None and "not a number" in bad.error


def test_numeric_compares_integers_exactly():
    # the default 1e-6 relative tolerance would take any integer within a millionth of the answer
    v = NumericVerifier("n")
    assert v.score(sample("<answer>1234568</answer>", "1234567")).score == 0.0
    assert v.score(sample("<answer>1082152000000000</answer>", str(12345678 * 87654321))).score == 0.0
    assert v.score(sample(f"<answer>{12345678 * 87654321:,}</answer>", str(12345678 * 87654321))).score == 1.0
    assert v.score(sample(f"<answer>{2**1100 + 1}</answer>", str(2**1100))).score == 0.0
    assert v.score(sample("<answer>1e400</answer>", str(2**1400))).score == 0.0
    assert v.score(sample("<answer>1234567.0</answer>", "1234567")).score == 1.0   # not two integers


def test_numeric_absolute_tolerance_near_zero():
    v = NumericVerifier("n", rel_tol=0.0, abs_tol=1e-6)
    assert v.score(sample("<answer>0.0000005</answer>", "0")).score == 1.0
    assert v.score(sample("<answer>0.00001</answer>", "0")).score == 0.0


GSM8K_ANSWER = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
                "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")


@pytest.mark.parametrize("verifier", [
    MathVerifier("m", ["boxed"], ground_truth_marker="####"),
    NumericVerifier("n", ["boxed"], ground_truth_marker="####"),
    ExactVerifier("e", ["boxed"], ground_truth_marker="####"),
])
def test_ground_truth_marker_compares_with_the_final_answer_of_a_worked_solution(verifier):
    """GSM8K's answer field is a worked solution; only what follows the last #### is the answer."""
    assert verifier.score(RewardInput("q", "so \\boxed{72}", GSM8K_ANSWER)).score == 1.0
    assert verifier.score(RewardInput("q", "so \\boxed{24}", GSM8K_ANSWER)).score == 0.0   # an intermediate value
    assert verifier.score(RewardInput("q", "so \\boxed{72}", "72")).score == 1.0           # no marker: all of it


def test_without_a_marker_the_worked_solution_is_not_an_answer():
    """Why the marker is needed: a numeric verifier cannot read the solution text as a number."""
    r = NumericVerifier("n", ["boxed"]).score(RewardInput("q", "so \\boxed{72}", GSM8K_ANSWER))
    assert r.error is not None and "not a number" in r.error


_SCORE_OFF_THE_MAIN_THREAD = """
import json, threading
from rlxf.rewards.answers import MathVerifier
from rlxf.rewards.types import RewardInput
v, out = MathVerifier("m"), {}
# a reference written as a power: to a plain number the powers are refused unparsed (unevaluated)
def run():
    for a in ("9^{9^{9^{9}}}", "10^{10^{6}}", "100000!", "2^{10}", "2^{3^{2}}+512", "1024"):
        r = v.score(RewardInput(prompt="p", response=f"<answer>{a}</answer>", ground_truth="2^{10}"))
        out[a] = [r.score, r.metrics.get("too_large")]
worker = threading.Thread(target=run)
worker.start()
worker.join()
print(json.dumps(out))
"""


def test_math_refuses_answers_too_large_to_compute_even_off_the_main_thread():
    # sympy computes 9^(9^(9^9)) in one C call that holds the GIL: no timeout stops it, and
    # every other sample scored in the process waits. Off the main thread math-verify has no
    # timeout at all, so the answer's size is bounded before it is compared. (A process of
    # its own, so that a regression fails this test instead of freezing the suite.)
    done = subprocess.run([sys.executable, "-c", _SCORE_OFF_THE_MAIN_THREAD], capture_output=True, text=True,
                          timeout=120)
    scores = json.loads(done.stdout.strip().splitlines()[-1])
    for huge in ("9^{9^{9^{9}}}", "10^{10^{6}}", "100000!"):
        assert scores[huge] == [0.0, 1.0], huge
    for fine in ("2^{10}", "2^{3^{2}}+512", "1024"):
        assert scores[fine] == [1.0, None], fine


def test_digits_bound_is_an_upper_bound():
    import sympy

    from rlxf.rewards.answers import _digits_bound

    for expr in (sympy.Integer(10) ** 50, sympy.Pow(2, sympy.Pow(3, 2), evaluate=False),
                 sympy.factorial(300, evaluate=False), sympy.Rational(-7, 3)):
        assert _digits_bound(expr) >= len(str(abs(int(expr.evalf(400).round())))) - 1, expr
    assert _digits_bound(sympy.Pow(9, sympy.Pow(9, sympy.Pow(9, 9, evaluate=False), evaluate=False),
                                   evaluate=False)) == float("inf")
    assert _digits_bound(sympy.Symbol("x") ** (10**10)) < 100   # symbolic: nothing is computed

"""Answers a policy writes to get reward without solving, or to stop the run: they score 0.

Found by an adversarial review: reasoning-gym scorers that eval the answer (code ran in the
trainer, and could rewrite the verifier), verifiers that raised on short answers (a reward
failure, which stops the run), tolerances that let a wrong integer pass, a judge's incidental
"9/10" overriding its verdict, and extraction that was quadratic in unclosed tags.
"""

from __future__ import annotations

import pytest

from rlxf.config.reward import JudgeVerifierConfig
from rlxf.rewards.answers import MathVerifier, NumericVerifier
from rlxf.rewards.code import checks_pass, outputs_match, parse_assert, values_match
from rlxf.rewards.extract import answer_tag, boxed, parse_integer, parse_number
from rlxf.rewards.judge import ChatReply, JudgeVerifier, parse_score
from rlxf.rewards.reasoning_gym import (
    ReasoningGymVerifier,
    answer_is_safe_to_run,
    score_answer_safely,
    unevaluated_operator,
)
from rlxf.rewards.types import RewardInput

rg = pytest.importorskip("reasoning_gym")


def _entries(name: str, n: int = 3) -> list[dict]:
    dataset = rg.create_dataset(name, size=n, seed=5)
    return [dataset[i] for i in range(n)]


def _score(name: str, answer: str, entry: dict):
    verifier = ReasoningGymVerifier("rg")
    return verifier.score(RewardInput("q", f"<answer>{answer}</answer>", entry))


def _marker_payloads(marker) -> list[str]:
    path = str(marker)
    return [f"__import__('pathlib').Path({path!r}).touch()",
            f"exec(\"open({path!r}, 'w').close()\")",
            f"(lambda: open({path!r}, 'w'))()",
            f"ｅｘｅｃ(\"open({path!r}, 'w').close()\")"]   # NFKC: Python reads it as exec


# string_insertion, spiral_matrix, binary_matrix and n_queens eval() the answer; countdown,
# puzzle24, polynomial_multiplication and the integration tasks parse_expr() it
PYTHON_EVAL = ["string_insertion", "spiral_matrix", "binary_matrix", "n_queens"]
SYMPY_PARSE = ["countdown", "puzzle24", "polynomial_multiplication", "simple_integration", "intermediate_integration"]
EVALUATING = PYTHON_EVAL + SYMPY_PARSE


@pytest.mark.parametrize("name", EVALUATING)
def test_reasoning_gym_answers_that_would_run_code_score_zero_and_run_nothing(name, tmp_path):
    entry = _entries(name, 1)[0]
    marker = tmp_path / "ran"
    for payload in _marker_payloads(marker):
        result = _score(name, payload, entry)
        assert result.score == 0.0, payload
        # sympy's parser is refused the answer; Python's eval there reads literals only
        assert result.metrics.get("unsafe") == (1.0 if name in SYMPY_PARSE else None), payload
    assert not marker.exists()


def test_python_eval_scorers_read_literals_but_not_their_own_variables():
    """string_insertion gives 0.1 for the answer as a list of characters; eval of the name of
    its own variable holding the reference answer (``oracle_answer``) gave the same 0.1."""
    entry = _entries("string_insertion", 1)[0]
    as_list = repr(list(entry["answer"]))
    assert _score("string_insertion", as_list, entry).score == 0.1
    assert _score("string_insertion", "oracle_answer", entry).score == 0.0
    assert _score("string_insertion", "entry['answer']", entry).score == 0.0
    assert _score("string_insertion", entry["answer"], entry).score == 1.0


@pytest.mark.parametrize("name", EVALUATING + ["leg_counting", "word_sequence_reversal", "gcd", "family_relationships"])
def test_reference_answers_still_score_as_the_dataset_scores_them(name):
    dataset = rg.create_dataset(name, size=1, seed=0)
    for entry in _entries(name):
        # a reference sympy left unevaluated restates the question: test_unevaluated_references_review
        want = (0.0, "unevaluated") if unevaluated_operator(str(entry["answer"])) else (
            dataset.score_answer(entry["answer"], entry), None)
        assert score_answer_safely(dataset, str(entry["answer"]), entry) == want


@pytest.mark.parametrize("answer, must_parse, safe", [
    ("9**9**9", False, False), ("9**(10**6)", True, False), ("2**100000", True, False),
    ("[0]*10**9", False, False), ("'a'*10**9", False, False), ("'%999999999d' % 1", False, False),
    ("1 << 10**9", False, False), ("[x for x in 'ab' for y in 'cd']", False, False),
    ("f'{1:999999999}'", False, False), ("x.__class__", False, False),
    ("-9*x**8/10 + 3*x**4/2 + C", True, True), ("2*(-10*x - 10)**(3/2)/3 + C", True, True),
    ("3*Integral(x**3*cos(3*x), x) + exp(x) + C", True, True), ("82 + 20 + 67 - 50", True, True),
    ("[[1, 2], [3, 4]]", False, True), ("['a', 'b']", False, True),
    ("I don't know", False, True),     # not Python: eval would refuse it, nothing runs
    ("100000!", True, False),          # parse_expr rewrites it to a factorial first
])
def test_which_answers_may_be_run(answer, must_parse, safe):
    assert answer_is_safe_to_run(answer, sympy=must_parse) is safe


def test_a_scorer_that_raises_on_an_answer_scores_it_zero_but_one_that_raises_on_the_reference_fails():
    entry = _entries("prime_factorization", 1)[0]
    result = _score("prime_factorization", "I don't know", entry)
    assert result.score == 0.0 and result.metrics["unscorable"] == 1.0 and result.error is None

    class Broken:
        def score_answer(self, answer, entry):
            raise RuntimeError("this scorer is broken")

    with pytest.raises(RuntimeError, match="broken"):
        score_answer_safely(Broken(), "42", {"answer": "42"})


def test_the_reasoning_gym_task_scores_through_the_same_guard(tmp_path):
    from rlxf.data.tasks.reasoning_gym import ReasoningGymTask

    task = ReasoningGymTask("countdown", {})
    entry = _entries("countdown", 1)[0]
    marker = tmp_path / "ran"
    assert task.score(f"<answer>{_marker_payloads(marker)[0]}</answer>", entry, {}) == 0.0
    assert not marker.exists()
    assert task.score(f"<answer>{entry['answer']}</answer>", entry, {}) == 1.0


def test_math_answers_that_raise_or_take_minutes_score_zero():
    v = MathVerifier("math")
    for answer in (r"2^{1/0}", r"2^{\sqrt{-1}}"):
        # to an expression (to a plain number they are refused unparsed: not written as a number)
        result = v.score(RewardInput("q", rf"\boxed{{{answer}}}", r"\sqrt{2}"))
        assert result.score == 0.0 and result.metrics["unscorable"] == 1.0 and result.error is None
    for answer in (r"\Gamma(10^6)", r"\prod_{k=1}^{10^6} k", r"\Gamma(3000000)"):
        result = v.score(RewardInput("q", rf"\boxed{{{answer}}}", "5"))
        assert result.score == 0.0 and result.metrics["too_large"] == 1.0
    assert v.score(RewardInput("q", r"\boxed{\sum_{k=1}^{10} k}", "55")).score == 0.0   # the question restated
    assert v.score(RewardInput("q", r"\boxed{5!}", "120")).metrics["unevaluated"] == 1.0   # 5! is no result


def test_an_integer_ground_truth_takes_no_relative_tolerance():
    v = NumericVerifier("numeric", ["answer_tag", "last_number"])
    def score(answer, truth):
        return v.score(RewardInput("q", f"<answer>{answer}</answer>", truth)).score
    assert score("1234568.0", "1234567") == 0.0 and score("1234567.5", "1234568") == 0.0
    assert score("123456800.0", "123456789") == 0.0 and score("1.234567e8", "123456789") == 0.0
    assert score("1234567.0", "1234567") == 1.0 and score("1.234567e6", "1234567") == 1.0
    assert score("0.5", "0.5000001") == 1.0          # a float ground truth keeps rel_tol
    assert score("5" + "%" * 994, "5") == 0.0         # was a RecursionError
    assert score("9" * 5000, "3") == 0.0              # was Python's int-from-text limit
    assert parse_number("50%") == 0.5 and parse_number("5%%") is None and parse_integer("9" * 5000) is None


def test_code_results_compare_an_expected_integer_without_a_relative_band():
    assert not values_match(1000000900.0, 1000000000) and not outputs_match("1000000900.0", "1000000000")
    assert values_match(2.0000000001, 2) and values_match(1000000000.0, 1000000000)   # float noise only
    assert values_match(0.30000000000000004, 0.3)
    checks = parse_assert("assert count(1000000000) == 1000000000").checks
    assert not checks_pass(checks, '[{"value": 1000000900.0}]', 1e-6)
    # what a program reports that is not JSON Python can read fails the test, it does not raise
    assert not checks_pass(checks, "[" + "9" * 5000 + "]", 1e-6)
    assert not checks_pass(checks, "[" * 100_000, 1e-6)


@pytest.mark.parametrize("reply, expected", [
    ("Score: 1. Only 9/10 of the derivation holds.", 1.0),
    ("Score: 0 -- it claims 10 out of 10 confidence.", 0.0),
    ("I rate it 7/10", 7.0),
])
def test_an_incidental_fraction_never_overrides_an_explicit_score(reply, expected):
    assert parse_score(reply, 0, 10) == expected


def test_a_verdict_quoted_from_the_response_never_overrides_the_format_the_rubric_asks_for():
    """The judge's reply may quote the response after its own verdict; a format the rubric did
    not ask for (the response's own "[[10]]") loses to the one it did, whichever it is."""
    judge = JudgeVerifier("j", client=None, rubric=JudgeVerifierConfig.model_fields["rubric"].default)  # SCORE:
    assert judge.verdict(ChatReply("SCORE: 2\nIt ends with [[10]] and <score>10</score>.")).metrics["raw"] == 2.0
    mt_bench = JudgeVerifier("j", client=None, rubric="Grade {response}. Reply [[rating]].")
    assert mt_bench.verdict(ChatReply("[[2]]. It says Score: 10 of itself.")).metrics["raw"] == 2.0
    both = JudgeVerifier("j", client=None, rubric="Reply SCORE: n or [[n]].")   # no one format: the last
    assert both.verdict(ChatReply("SCORE: 2. It says [[10]].")).metrics["raw"] == 10.0


def test_extraction_of_unclosed_tags_finds_nothing_in_one_pass():
    assert boxed("\\boxed{" * 50_000) is None and answer_tag("<answer>" * 50_000) is None
    assert boxed(r"a \boxed{1} b \boxed{2 {3}}") == "2 {3}" and boxed(r"\boxed{1} \boxed{2") == "1"
    assert answer_tag("<answer>a</answer> <answer>b") == "a"

r"""Answer checkers: mathematical equivalence (math-verify), exact string, numeric tolerance.

All three extract the final answer first (``rlxf.rewards.extract``); a response without one
scores 0 with ``metrics["extracted"] = 0`` -- a wrong answer, not an error. A missing ground
truth *is* an error (the data is broken, not the response).

    >>> v = NumericVerifier("numeric", ["answer_tag", "last_number"])
    >>> v.score(RewardInput("2+2?", "It is <answer>4.0</answer>", "4")).score
    1.0
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from rlxf.errors import MissingExtraError
from rlxf.rewards.base import SyncVerifier
from rlxf.rewards.extract import extract_answer, numeral, parse_integer, parse_number
from rlxf.rewards.types import RewardInput, RewardResult


def _ground_truth_text(x: RewardInput, marker: str | None = None) -> str | None:
    """The reference answer as text: a dict's ``answer``, cut after the last ``marker`` if given
    and present (``"####"`` turns GSM8K's ``"... so 3 + 4 = 7.\n#### 7"`` into ``"7"``)."""
    gt = x.ground_truth
    if isinstance(gt, dict):  # e.g. a reasoning-gym style entry
        gt = gt.get("answer")
    if gt is None:
        return None
    gt = str(gt)
    if marker and marker in gt:
        gt = gt.rsplit(marker, 1)[1]
    return gt.strip() or None


def _verdict(ok: bool) -> RewardResult:
    return RewardResult(1.0 if ok else 0.0, {"extracted": 1.0, "correct": float(ok)})


_NOTHING_EXTRACTED = RewardResult(0.0, {"extracted": 0.0, "correct": 0.0})
_NO_GROUND_TRUTH = "the sample has no ground truth answer to compare with"


class MathVerifier(SyncVerifier):
    """1.0 if the extracted answer is mathematically equivalent to the ground truth.

    Equivalence is math-verify's (Hugging Face): both sides are parsed from LaTeX or plain
    expressions to sympy and compared symbolically and numerically (``float_rounding``
    decimals), so ``\\frac{1}{2}``, ``0.5`` and ``1/2`` all match.

    An answer is a result, not the computation that leads to it, which sympy would carry out
    for the policy (metric ``unevaluated``). Where the reference is a number, the answer must
    be written as one (``rlxf.rewards.extract.numeral``: ``7``, ``7.0``, ``x = 7``, ``1,000``,
    ``\\frac{2}{4}``, ``50\\%``, ``1.5 \\times 10^{3}``, ``7 \\text{ cm}``), so ``3+4``,
    ``5!``, ``\\binom{5}{2}``, ``48/6`` and ``2^3`` score 0; where it is a tuple, interval or
    set of numbers, each element must be. Where it is an expression, any equivalent expression
    is an answer, but not one holding a sum, product, integral, limit or derivative the
    reference does not hold.

    A percentage on one side only is read both ways: ``50\\%`` and ``12.5\\%`` match references of
    50 and 12.5 (the number a "what percent?" question asks for) and of 0.5 and 0.125 (their
    values); a reference of ``50\\%`` takes 50 and 0.5. Two percentages compare as they are.
    """

    def __init__(self, name: str, extract: Sequence[str] = ("answer_tag", "boxed", "last_number"),
                 answer_tag: str = "answer", float_rounding: int = 6, parse_timeout_s: int = 5,
                 ground_truth_marker: str | None = None):
        super().__init__(name)
        self.ground_truth_marker = ground_truth_marker
        try:
            import math_verify  # noqa: PLC0415
        except ImportError as e:
            raise MissingExtraError("the math verifier needs math-verify: pip install 'rlxf[tasks]'") from e
        self._mv = math_verify
        self.extract = list(extract)
        self.answer_tag = answer_tag
        self.float_rounding = float_rounding
        self.parse_timeout_s = parse_timeout_s
        self._gold_cache: OrderedDict[str, Any] = OrderedDict()  # a group shares its ground truth

    @classmethod
    def from_config(cls, cfg: Any) -> MathVerifier:
        return cls(cfg.label, cfg.extract, cfg.answer_tag, cfg.float_rounding, cfg.parse_timeout_s,
                   cfg.ground_truth_marker)

    def _timeout(self) -> int | None:
        # math-verify's timeout uses SIGALRM, which only the main thread may set
        on_main = threading.current_thread() is threading.main_thread()
        return self.parse_timeout_s if on_main and self.parse_timeout_s > 0 else None

    def _parse(self, text: str) -> list:
        if "$" not in text and "\\boxed" not in text:
            text = f"${text}$"
        return self._mv.parse(text, parsing_timeout=self._timeout())

    def _gold(self, text: str) -> list:
        if text not in self._gold_cache:
            self._gold_cache[text] = self._parse(text)
            if len(self._gold_cache) > 4096:
                self._gold_cache.popitem(last=False)
        return self._gold_cache[text]

    def score(self, x: RewardInput) -> RewardResult:
        gt = _ground_truth_text(x, self.ground_truth_marker)
        if gt is None:
            return RewardResult.failed(_NO_GROUND_TRUTH)
        found = extract_answer(x.response, self.extract, self.answer_tag)
        if found is None:
            return _NOTHING_EXTRACTED
        gold_number = numeral(gt)
        gold = self._gold(gt if gold_number is None else _latex(gold_number))
        if not gold:
            return RewardResult.failed(f"math-verify cannot parse the ground truth {gt!r}")
        if (_COSTLY.search(found[0]) and _BIG_ARGUMENT.search(_LOWER_BOUND.sub(r"\1", found[0]))
                and not _COSTLY.search(gt)):
            # \Gamma(10^6), \prod_{k=1}^{10^6} k: parsing evaluates them (seconds to minutes in
            # sympy, where math-verify's timeout cannot reach off the main thread); an answer the
            # reference does not write that way is not computed
            return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "too_large": 1.0})
        answer = found[0]
        if gold_number is not None:
            number = numeral(answer)
            if number is None:
                # 3+4, 5!, \binom{5}{2}, 48/6, 2^3: the question's own arithmetic copied out
                return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "unevaluated": 1.0})
            answer = _latex(number)   # 1\,000, 1.5e3 and \$7 read as the numbers they are
        elif _numbers_listed(gt, brackets=True) and not _numbers_listed(answer):
            # (3+4, 2) for (7, 2), [1, 1+2) for [1, 3): the same, element by element
            return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "unevaluated": 1.0})
        try:
            pred = self._parse(answer)
            if not pred:
                return _verdict(False)
            if _unevaluated(pred) - _unevaluated(gold):
                # \sum_{k=1}^{100} k, \int_0^1 x^2 dx, \lim ..., \frac{d}{dx} ...: the question
                # restated, which sympy would answer for the policy (and a sum of 10^8 terms
                # keeps a thread busy for hours); a reference written that way may be matched
                return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "unevaluated": 1.0})
            if any(_digits_bound(p) > MAX_ANSWER_DIGITS for p in pred if hasattr(p, "free_symbols")):
                # 9^{9^{9^{9}}}: sympy would compute it inside one C call that holds the GIL, which
                # no timeout interrupts, and every other sample's scoring in this process waits on it
                return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "too_large": 1.0})
            ok = self._mv.verify(gold, pred, float_rounding=self.float_rounding, timeout_seconds=self._timeout())
            if not ok and gold_number is not None and gold_number.endswith("%") != number.endswith("%"):
                # 12.5% for a reference of 12.5 (math-verify reads an integer's % so, not a decimal's)
                ok = self._mv.verify(self._gold(_latex(gold_number.rstrip("%"))),
                                     self._parse(_latex(number.rstrip("%"))),
                                     float_rounding=self.float_rounding, timeout_seconds=self._timeout())
        except Exception:  # noqa: BLE001 - 2^{1/0} is a wrong answer, not a broken verifier (the gold parsed)
            return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "unscorable": 1.0})
        return _verdict(bool(ok))


# an answer whose value has more decimal digits than this is not computed (MathVerifier.score)
MAX_ANSWER_DIGITS = 100_000
# functions whose value sympy computes while parsing, and an argument that makes that long: a
# number of five digits or more, or a power of a number
_COSTLY = re.compile(r"(?<![A-Za-z])(?:gamma|Gamma|Pi|factorial|binomial|prod|product)(?![A-Za-z])|[ΓΠ∏!]")
_BIG_ARGUMENT = re.compile(r"\d{5}|\d\s*[}\)]?\s*(?:\^|\*\*)")
# a big operator's lower bound: in \prod_{k=1}^{5} the "1}^" is not a power of 1
_LOWER_BOUND = re.compile(r"(\\prod(?:\\limits)?)\s*_\s*(?:\{[^{}]*\}|\w)")
_LISTED = re.compile(r"(\(|\[|\\\{)(.*)(\)|\]|\\\})", re.DOTALL)


def _numbers_listed(text: str, brackets: bool = False) -> bool:
    """Whether ``text`` is a tuple, interval or set of numbers, each written as a number
    (``numeral``): ``(1, 2)``, ``[0, \\frac{1}{2})``, ``\\{3, 4\\}``; without ``brackets``
    the bare list ``1, 2`` too."""
    text = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", text.strip().strip("$")).strip()
    m = _LISTED.fullmatch(text)
    if m is None and brackets:
        return False
    parts = (m[2] if m else text).split(",")
    return len(parts) > 1 and all(numeral(part) is not None for part in parts)


def _latex(number: str) -> str:
    """A plain number from ``numeral`` (``-5/2``, ``1.5e3``, ``50%``) in the LaTeX math-verify reads."""
    if number.endswith("%"):
        return _latex(number[:-1]) + r"\%"
    if "/" in number:
        num, den = number.split("/")
        sign, num = ("-", num[1:]) if num.startswith("-") else ("", num)
        return f"{sign}\\frac{{{num}}}{{{den}}}"
    mantissa, _, exponent = number.lower().partition("e")
    return f"{mantissa} \\times 10^{{{exponent}}}" if exponent else number


def _unevaluated(parsed: list) -> set[str]:
    """The operations left for the reader to carry out in parsed expressions (sums, products,
    integrals, limits, derivatives), by name: an answer holding one is the computation, not its
    result."""
    import sympy  # noqa: PLC0415 - math-verify's dependency, loaded with it

    kinds = (sympy.Sum, sympy.Product, sympy.Integral, sympy.Limit, sympy.Derivative)
    # "\sum_{k=1}^{100} k = 5050" states the computation and its result: the result is what counts
    values = [expr.rhs if isinstance(expr, sympy.Rel) else expr for expr in parsed if isinstance(expr, sympy.Basic)]
    return {type(node).__name__ for expr in values for node in expr.atoms(*kinds)}


def _digits_bound(expr: Any) -> float:
    """An upper bound of the decimal digits of the value of a sympy expression's numbers
    (log10 of its magnitude), found without computing it: inf when it is too large to bound.

    Powers, factorials and binomials of numbers are what sympy evaluates in full; symbols and
    other functions are bounded by their arguments, which is all the guard needs.
    """
    import sympy  # noqa: PLC0415 - math-verify's dependency, loaded with it

    if expr.is_Rational:   # integers too
        return max(int(expr.p).bit_length(), int(expr.q).bit_length()) * 0.302
    if expr.is_Number or expr.is_Symbol or not expr.args:
        return 0.0
    if isinstance(expr, sympy.Pow) and not expr.free_symbols:
        exponent = _digits_bound(expr.exp)
        if exponent > 15:
            return math.inf
        return abs(float(expr.exp.evalf(20))) * max(_digits_bound(expr.base), 1.0)
    if isinstance(expr, (sympy.factorial, sympy.binomial)) and not expr.free_symbols:
        if _digits_bound(expr.args[0]) > 9:
            return math.inf
        n = abs(float(expr.args[0].evalf(20)))
        return n * math.log10(max(n, 10.0))
    parts = [_digits_bound(arg) for arg in expr.args]
    return sum(parts) if isinstance(expr, sympy.Mul) else max(parts) + math.log10(len(parts))


def _normalize(text: str, case_sensitive: bool, whitespace: bool) -> str:
    if whitespace:
        text = re.sub(r"\s+", " ", text.strip())
    return text if case_sensitive else text.lower()


class ExactVerifier(SyncVerifier):
    """1.0 if the extracted answer equals the ground truth as a string (after normalisation)."""

    def __init__(self, name: str, extract: Sequence[str] = ("answer_tag", "boxed", "last_line"),
                 answer_tag: str = "answer", case_sensitive: bool = False, normalize_whitespace: bool = True,
                 ground_truth_marker: str | None = None):
        super().__init__(name)
        self.ground_truth_marker = ground_truth_marker
        self.extract = list(extract)
        self.answer_tag = answer_tag
        self.case_sensitive = case_sensitive
        self.normalize_whitespace = normalize_whitespace

    @classmethod
    def from_config(cls, cfg: Any) -> ExactVerifier:
        return cls(cfg.label, cfg.extract, cfg.answer_tag, cfg.case_sensitive, cfg.normalize_whitespace,
                   cfg.ground_truth_marker)

    def score(self, x: RewardInput) -> RewardResult:
        gt = _ground_truth_text(x, self.ground_truth_marker)
        if gt is None:
            return RewardResult.failed(_NO_GROUND_TRUTH)
        found = extract_answer(x.response, self.extract, self.answer_tag)
        if found is None:
            return _NOTHING_EXTRACTED
        same = (_normalize(found[0], self.case_sensitive, self.normalize_whitespace)
                == _normalize(gt, self.case_sensitive, self.normalize_whitespace))
        return _verdict(same)


class NumericVerifier(SyncVerifier):
    """1.0 if the extracted answer is a number within tolerance of the ground truth:
    ``|a - b| <= max(rel_tol * max(|a|, |b|), abs_tol)`` (``math.isclose``). An integer
    ground truth (``-1,234``, however long) takes an integer exactly, or another number within
    ``abs_tol`` only: ``1234567.0`` and ``1.234567e6`` match 1234567, ``1234567.5`` does not.

    A percentage on one side only is read both ways, as ``MathVerifier`` reads it: ``50%``
    matches a reference of 50 (the number a "what percent?" question asks for) and of 0.5 (its
    value), and a reference of ``50%`` takes 50 and 0.5; two percentages compare as they are
    (``50%`` is not ``5000%``)."""

    def __init__(self, name: str, extract: Sequence[str] = ("answer_tag", "boxed", "last_number"),
                 answer_tag: str = "answer", rel_tol: float = 1e-6, abs_tol: float = 0.0,
                 ground_truth_marker: str | None = None):
        super().__init__(name)
        self.ground_truth_marker = ground_truth_marker
        self.extract = list(extract)
        self.answer_tag = answer_tag
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol

    @classmethod
    def from_config(cls, cfg: Any) -> NumericVerifier:
        return cls(cfg.label, cfg.extract, cfg.answer_tag, cfg.rel_tol, cfg.abs_tol, cfg.ground_truth_marker)

    def score(self, x: RewardInput) -> RewardResult:
        gt = _ground_truth_text(x, self.ground_truth_marker)
        if gt is None:
            return RewardResult.failed(_NO_GROUND_TRUTH)
        if parse_number(gt) is None:
            return RewardResult.failed(f"the ground truth {gt!r} is not a number")
        found = extract_answer(x.response, self.extract, self.answer_tag)
        if found is None:
            return _NOTHING_EXTRACTED
        return _verdict(any(self._close(g, a) for g, a in _percent_readings(gt, found[0])))

    def _close(self, gt: str, answer: str) -> bool:
        gold = parse_number(gt)
        exact_gold = parse_integer(gt)
        if exact_gold is not None:
            # an integer exactly, or within abs_tol however it is written: a relative 1e-6 would
            # pass 1234568 or 1234567.5 for 1234567 (and 1.234567e8 for 123456789), and any two
            # integers of 309 digits or more are both inf as floats
            exact_pred = parse_integer(answer)
            if exact_pred is not None:
                return exact_pred == exact_gold
            pred = parse_number(answer)
            return pred is not None and math.isfinite(pred) and abs(Fraction(pred) - exact_gold) <= self.abs_tol
        pred = parse_number(answer)
        return (gold is not None and pred is not None and math.isfinite(pred) and math.isfinite(gold)
                and math.isclose(pred, gold, rel_tol=self.rel_tol, abs_tol=self.abs_tol))


def _percent_readings(gt: str, answer: str) -> list[tuple[str, str]]:
    """(reference, answer) pairs to compare: as written, and where one side only is a
    percentage, with that side's number without its ``%`` too (``NumericVerifier``)."""
    gold, pred = numeral(gt), numeral(answer)
    if gold is None or pred is None or gold.endswith("%") == pred.endswith("%"):
        return [(gt, answer)]
    return [(gt, answer), (gold.rstrip("%"), pred.rstrip("%"))]

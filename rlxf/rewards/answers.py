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
from rlxf.rewards.extract import equation, extract_answer, fold_unicode, numeral, parse_integer, parse_number
from rlxf.rewards.types import RewardInput, RewardResult

# significant digits of the reference that float_rounding's decimal places must hold for agreement
# to those places to count (MathVerifier.places_from)
PLACES_DIGITS = 3


def _ground_truth_text(x: RewardInput, marker: str | None = None) -> str | None:
    """The reference answer as text: a dict's ``answer``, cut after the last ``marker`` if given
    and present (``"####"`` turns GSM8K's ``"... so 3 + 4 = 7.\n#### 7"`` into ``"7"``), its
    digits ASCII as the extracted answer's are (``fold_unicode``)."""
    gt = x.ground_truth
    if isinstance(gt, dict):  # e.g. a reasoning-gym style entry
        gt = gt.get("answer")
    if gt is None:
        return None
    gt = str(gt)
    if marker and marker in gt:
        gt = gt.rsplit(marker, 1)[1]
    return fold_unicode(gt).strip() or None


def _verdict(ok: bool) -> RewardResult:
    return RewardResult(1.0 if ok else 0.0, {"extracted": 1.0, "correct": float(ok)})


_NOTHING_EXTRACTED = RewardResult(0.0, {"extracted": 0.0, "correct": 0.0})
_NO_GROUND_TRUTH = "the sample has no ground truth answer to compare with"


class MathVerifier(SyncVerifier):
    """1.0 if the extracted answer is mathematically equivalent to the ground truth.

    Equivalence is math-verify's (Hugging Face): both sides are parsed from LaTeX or plain
    expressions to sympy and compared symbolically and numerically, so ``\\frac{1}{2}``,
    ``0.5`` and ``1/2`` all match. Numbers agree to ``float_rounding`` decimal places where those
    hold ``PLACES_DIGITS`` significant digits of the reference (``0.367879`` for ``e^{-1}``), and
    within a relative ``10^-float_rounding`` where they do not: math-verify rounds decimals to
    places and drops tiny differences, so ``0.0`` matched 6.626e-34 and ``e^{-50}``, and
    ``10^{-30}`` matched ``2^{-70}``. A reference that is a number is compared with a number
    here, exactly (``numbers_match``, or to the places); one that is a constant expression
    (``\\sqrt{2}``, ``e^{-50}``) after math-verify's yes, in value (``_values_agree``).

    An answer is a result, not the computation that leads to it, which sympy would carry out
    for the policy (metric ``unevaluated``). Where the reference is a number, the answer must
    be written as one (``rlxf.rewards.extract.numeral``: ``7``, ``7.0``, ``x = 7``, ``1,000``,
    ``\\frac{2}{4}``, ``50\\%``, ``1.5 \\times 10^{3}``, ``7 \\text{ cm}``), so ``3+4``,
    ``5!``, ``\\binom{5}{2}``, ``48/6`` and ``2^3`` score 0; where it is a tuple, interval or
    set of numbers, each element must be. Where it is an expression, any equivalent expression
    is an answer, but not one holding a sum, product, integral, limit or derivative the
    reference does not hold. A reference that is an equation in variables (``x^2 + y^2 = 25``,
    ``2x - y + 3z + 8 = 0``; ``extract.equation``) is that equation, not the number on its right.

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
        # how closely two numbers agree relatively: never looser than 10^-6, whatever the places
        # (float_rounding: 2 made any answer within 1% right, and 0 any answer of the same sign)
        self.rel_tol = Fraction(1, 10**max(float_rounding, 6))
        # where float_rounding's decimal places hold this many significant digits of the reference,
        # agreeing to those places is agreeing: 0.367879 for e^{-1}, 0.003333 for 1/300 (below it,
        # the rounding erases the reference: 0.0 "matched" e^{-50})
        self.places_from = Fraction(10) ** (PLACES_DIGITS - float_rounding)
        self.parse_timeout_s = parse_timeout_s
        self._gold_cache: OrderedDict[str, Any] = OrderedDict()  # a group shares its ground truth

    @classmethod
    def from_config(cls, cfg: Any) -> MathVerifier:
        return cls(cfg.label, cfg.extract, cfg.answer_tag, cfg.float_rounding, cfg.parse_timeout_s,
                   cfg.ground_truth_marker)

    def _same_places(self, gold: Fraction | None, answer: Fraction | None) -> bool:
        """Equal once rounded to ``float_rounding`` decimals, where those hold ``PLACES_DIGITS``
        significant digits of the reference or more (math-verify's reading, kept where it means
        something)."""
        return (gold is not None and answer is not None and abs(gold) >= self.places_from
                and round(gold, self.float_rounding) == round(answer, self.float_rounding))

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
        answer = found[0]
        if (_COSTLY.search(answer) and _BIG_ARGUMENT.search(_LOWER_BOUND.sub(r"\1", answer))
                and not _COSTLY.search(gt)):
            # \Gamma(10^6), \prod_{k=1}^{10^6} k: parsing evaluates them (seconds to minutes in
            # sympy, where math-verify's timeout cannot reach off the main thread); an answer the
            # reference does not write that way is not computed
            return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "too_large": 1.0})
        # a reference equation (x^2 + y^2 = 25) is not the number on its right: "25" does not answer it
        gold_number = None if equation(gt) else numeral(gt)
        if gold_number is not None:
            number = numeral(answer)   # 1\,000, 1.5e3 and \$7 read as the numbers they are
            if number is None:
                # 3+4, 5!, \binom{5}{2}, 48/6, 2^3: the question's own arithmetic copied out
                return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "unevaluated": 1.0})
            # an integer reference takes an integer exactly (numbers_match), as the numeric verifier's
            places = parse_integer(gold_number) is None and self._same_places(parse_number(gold_number),
                                                                              parse_number(number))
            return _verdict(numbers_match(gold_number, number, self.rel_tol) or places)
        gold = self._gold(gt)
        if not gold:
            return RewardResult.failed(f"math-verify cannot parse the ground truth {gt!r}")
        if _numbers_listed(gt, brackets=True) and not _numbers_listed(answer):
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
            # values first: an answer whose value differs is wrong without math-verify's simplify,
            # which takes seconds to hours on some (\sinh(64), (1+\sqrt{2})^{10^4}, \sin(64x))
            ok = (_values_agree(gold, pred, self.rel_tol, self.places_from)
                  and not _values_differ(gold, pred, Fraction(10, 10**self.float_rounding))
                  and self._mv.verify(gold, pred, float_rounding=self.float_rounding, timeout_seconds=self._timeout()))
        except Exception:  # noqa: BLE001 - 2^{1/0} is a wrong answer, not a broken verifier (the gold parsed)
            return RewardResult(0.0, {"extracted": 1.0, "correct": 0.0, "unscorable": 1.0})
        return _verdict(bool(ok))


# an answer whose value has more decimal digits than this is not computed (MathVerifier.score)
MAX_ANSWER_DIGITS = 100_000
# nor one with a function of a number of more digits than this: sympy evaluates \sin(9^{9^5})
# to its argument's 56,000 digits (seconds)
MAX_ARGUMENT_DIGITS = 1000
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


def _unevaluated(parsed: list) -> set[str]:
    """The operations left for the reader to carry out in parsed expressions (sums, products,
    integrals, limits, derivatives), by name: an answer holding one is the computation, not its
    result."""
    import sympy  # noqa: PLC0415 - math-verify's dependency, loaded with it

    kinds = (sympy.Sum, sympy.Product, sympy.Integral, sympy.Limit, sympy.Derivative)
    return {type(node).__name__ for expr in _values(parsed) for node in expr.atoms(*kinds)}


def _values(parsed: list) -> list:
    """The sympy values of math-verify's parse: of an equation, its right side (in
    "\\sum_{k=1}^{100} k = 5050" and "x = 7" the result is what counts, as math-verify reads it)."""
    import sympy  # noqa: PLC0415 - math-verify's dependency, loaded with it

    return [expr.rhs if isinstance(expr, sympy.Rel) else expr for expr in parsed if isinstance(expr, sympy.Basic)]


def _values_agree(gold: list, pred: list, rel_tol: Fraction, places_from: Fraction) -> bool:
    """Whether a reference and an answer that are real constants (``e^{-50}``, ``0.0``), or
    tuples, sets or intervals of them, agree within ``rel_tol`` relatively, value by value, where
    the reference's value is below ``places_from``. math-verify rounds decimals to places and
    drops ("chops") differences below its precision, so every tiny constant matched 0.0 and any
    other; at or above ``places_from`` its agreement to those places is kept. Anything else
    (symbols, a complex number, a zero sympy cannot prove) is math-verify's to judge."""
    import sympy  # noqa: PLC0415 - math-verify's dependency, loaded with it

    g, p = (next(iter(_values(parsed)), None) for parsed in (gold, pred))
    g_values, p_values = _real_values(g), _real_values(p)
    if g_values is None or p_values is None or len(g_values) != len(p_values):
        return True
    if isinstance(g, sympy.FiniteSet) or isinstance(p, sympy.FiniteSet):
        g_values, p_values = sorted(g_values), sorted(p_values)
    rel, big = (sympy.Rational(f.numerator, f.denominator) for f in (rel_tol, places_from))
    return all(a == b or (a.is_finite and b.is_finite and bool(abs(a) >= big or abs(a - b) <= rel * max(abs(a), abs(b))))
               for a, b in zip(g_values, p_values, strict=True))


def _real_values(expr: Any) -> list | None:
    """The values of a real constant, of the elements of a tuple or set of them, or of an
    interval's ends: a fraction or a decimal exactly (``0.333333`` is 333333/10^6, as
    ``numbers_match`` reads it, not the binary float below it that math-verify holds), other
    constants to 30 digits; None for anything else."""
    import sympy  # noqa: PLC0415 - math-verify's dependency, loaded with it

    if isinstance(expr, sympy.Interval):
        items = (expr.start, expr.end)
    else:
        items = expr.args if isinstance(expr, (sympy.Tuple, sympy.FiniteSet)) else (expr,)
    values = []
    for item in items:
        if not isinstance(item, sympy.Expr) or item.free_symbols:
            return None
        value = sympy.Rational(str(item)) if item.is_Float else item if item.is_Rational else item.evalf(30)
        if not value.is_comparable:   # complex, or a zero sympy cannot prove (-0.e-165)
            return None
        values.append(value)
    return values


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
    if isinstance(expr, sympy.Function):
        if max(parts) > MAX_ARGUMENT_DIGITS:
            return math.inf
        if isinstance(expr, (sympy.exp, sympy.sinh, sympy.cosh)):   # e^x has |x| / ln 10 digits
            return 10 ** max(parts) * math.log10(math.e) if max(parts) <= 15 else math.inf
    return sum(parts) if isinstance(expr, sympy.Mul) else max(parts) + math.log10(len(parts))


def _values_differ(gold: list, pred: list, abs_tol: Fraction) -> bool:
    """Whether a reference and an answer that are expressions take values that differ by more
    than ``abs_tol`` and a relative 10^-9, as constants or at a point of their variables (each
    near 0.45): then nothing math-verify does -- round to its places, simplify -- makes them
    equal, and its simplify, which takes seconds to hours on some (``\\sinh(64)``,
    ``(1+\\sqrt{2})^{10^4}``, ``\\sin(64x)``), need not say so. Equations, sets, matrices,
    symbols (which math-verify reads as words), decimals (which it rounds) and what cannot be
    evaluated are math-verify's to judge. Variables are real, as math-verify makes them: a point
    of reals keeps every identity simplify finds."""
    import sympy  # noqa: PLC0415 - math-verify's dependency, loaded with it

    g, p = (next((e for e in parsed if isinstance(e, sympy.Basic)), None) for parsed in (gold, pred))
    if not all(isinstance(e, sympy.Expr) and not e.is_Matrix and not e.is_Symbol and not e.has(sympy.Float)
               and not _unevaluated([e]) for e in (g, p)):
        return False
    variables = sorted(g.free_symbols | p.free_symbols, key=str)
    point = {v: sympy.pi / 10 + sympy.Rational(k + 1, 7) for k, v in enumerate(variables)}
    try:
        a, b = (e.evalf(30, subs=point) for e in (g, p))
        gap, scale = abs(a - b), abs(a) + abs(b)
        return bool(gap.is_comparable and scale.is_comparable
                    and gap > max(sympy.Rational(abs_tol.numerator, abs_tol.denominator), scale / 10**9))
    except Exception:  # noqa: BLE001 - not evaluable there: math-verify's to judge
        return False


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
        answer = found[0]
        if found[1] == "last_number" and not gt.rstrip().endswith("%"):   # the number, not its % sign
            answer = re.sub(r"\\?%$", "", answer)
        same = (_normalize(answer, self.case_sensitive, self.normalize_whitespace)
                == _normalize(gt, self.case_sensitive, self.normalize_whitespace))
        return _verdict(same)


class NumericVerifier(SyncVerifier):
    """1.0 if the extracted answer is a number within tolerance of the ground truth:
    ``|a - b| <= max(rel_tol * max(|a|, |b|), abs_tol)``, exactly (``numbers_match``: ``1e-400``
    is not 0, ``1e400`` is not inf). An integer ground truth (``-1,234``, however long) takes an
    integer exactly, or another number within ``abs_tol`` only: ``1234567.0`` and ``1.234567e6``
    match 1234567, ``1234567.5`` does not.

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
        for option, value in (("rel_tol", rel_tol), ("abs_tol", abs_tol)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"numeric verifier {name!r}: {option} must be a finite number >= 0, not {value!r}")
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol

    @classmethod
    def from_config(cls, cfg: Any) -> NumericVerifier:
        return cls(cfg.label, cfg.extract, cfg.answer_tag, cfg.rel_tol, cfg.abs_tol, cfg.ground_truth_marker)

    def score(self, x: RewardInput) -> RewardResult:
        gt = _ground_truth_text(x, self.ground_truth_marker)
        if gt is None:
            return RewardResult.failed(_NO_GROUND_TRUTH)
        if equation(gt):
            return RewardResult.failed(f"the ground truth {gt[:100]!r} is an equation, not a number: the numeric "
                                       "verifier would take the number on its right side for the answer; "
                                       "score it with `math`")
        if parse_number(gt) is None:
            return RewardResult.failed(f"the ground truth {gt[:100]!r} is not a number the numeric verifier reads "
                                       "(42, -1.5, 3/4, 1e-3, 50%; at most 4,000 digits and an exponent within "
                                       "+-4,000); fix the sample, or score it with `math` or `exact`")
        found = extract_answer(x.response, self.extract, self.answer_tag)
        if found is None:
            return _NOTHING_EXTRACTED
        return _verdict(numbers_match(gt, found[0], self.rel_tol, self.abs_tol))


def numbers_match(gt: str, answer: str, rel_tol: float | Fraction, abs_tol: float | Fraction = 0) -> bool:
    """Whether ``answer`` writes the number ``gt`` writes (``numeral``), within
    ``|a - b| <= max(rel_tol * max(|a|, |b|), abs_tol)``; an integer ``gt`` takes an integer
    exactly, or another number within ``abs_tol`` only. Compared exactly, as fractions (a
    tolerance as the decimal it is written as): floats read ``1e-400`` as 0 and ``1e400`` as inf.
    A percentage on one side only is read both ways (``_percent_readings``).

    >>> numbers_match("0", "1e-400", 1e-6), numbers_match("1e-400", "1.0000001e-400", 1e-6)
    (False, True)
    """
    rel, tol = Fraction(str(rel_tol)), Fraction(str(abs_tol))
    return any(_close(g, a, rel, tol) for g, a in _percent_readings(gt, answer))


def _close(gt: str, answer: str, rel_tol: Fraction, abs_tol: Fraction) -> bool:
    gold, pred = parse_number(gt), parse_number(answer)
    if gold is None or pred is None:
        return False
    return fractions_close(gold, pred, rel_tol, abs_tol,
                           integers=(parse_integer(gt) is not None, parse_integer(answer) is not None))


def fractions_close(gold: Fraction, pred: Fraction, rel_tol: Fraction, abs_tol: Fraction,
                    integers: tuple[bool, bool] = (False, False)) -> bool:
    """Whether ``|pred - gold| <= max(rel_tol * max(|pred|, |gold|), abs_tol)``, exactly; a
    ``gold`` written as an integer (``integers``: whether gold, pred are) takes an integer
    exactly, or another number within ``abs_tol`` only: a relative 1e-6 would pass 1234568 or
    1234567.5 for 1234567 (and 1.234567e8 for 123456789).

    >>> fractions_close(Fraction(7), Fraction(7000001, 10**6), Fraction(1, 10**6), Fraction(0), (True, False))
    False
    """
    if integers[0]:
        return pred == gold or (not integers[1] and abs(pred - gold) <= abs_tol)
    return abs(pred - gold) <= max(rel_tol * max(abs(pred), abs(gold)), abs_tol)


def _percent_readings(gt: str, answer: str) -> list[tuple[str, str]]:
    """(reference, answer) pairs to compare: as written, and where one side only is a
    percentage, with that side's number without its ``%`` too (``NumericVerifier``)."""
    gold, pred = numeral(gt), numeral(answer)
    if gold is None or pred is None or gold.endswith("%") == pred.endswith("%"):
        return [(gt, answer)]
    return [(gt, answer), (gold.rstrip("%"), pred.rstrip("%"))]

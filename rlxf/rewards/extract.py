r"""Find the final answer in a response: in what follows its reasoning (``after_reasoning``).

    >>> extract_answer("so x = 3. <answer> 42 </answer>", ["answer_tag", "boxed"])
    ('42', 'answer_tag')
    >>> extract_answer("thus \\boxed{\\frac{1}{2}}.", ["answer_tag", "boxed"])
    ('\\frac{1}{2}', 'boxed')
    >>> extract_answer("3 apples and 1,250.5 pears", ["last_number"])
    ('1250.5', 'last_number')
    >>> extract_answer("no answer here", ["answer_tag", "boxed"]) is None
    True
    >>> extract_answer("<think>maybe \\boxed{3}?</think> It is 4.", ["boxed", "last_number"])
    ('4', 'last_number')
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from fractions import Fraction

# a percent sign stays with its number ("It is 50%." -> "50%"), which the verifiers read both ways
_NUMBER = re.compile(r"(?:-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?|-?\.\d+)(?:\\?%)?")
_MAX_INTEGER_DIGITS = 4000   # Python refuses int() of text over 4,300 digits
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_NOT_ASCII = re.compile(r"[^\x00-\x7f]")
# minus signs other than "-" (U+2212 as typeset, small; full-width is folded with its block)
_MINUS_SIGNS = "\u2212\ufe63"


def fold_unicode(text: str) -> str:
    """``text`` with other ways of writing digits and ASCII folded to ASCII, so every answer
    checker reads an answer alike: each Unicode decimal digit (``４``, ``٤``, ``४``, ``𝟒``) as its
    digit, full-width ASCII (``＋``, ``．``, ``％``) as ASCII, a minus sign (U+2212) as ``-``.
    Nothing else: ``²`` and ``½`` keep their meaning (NFKC would read ``10²`` as 102)."""
    return text if text.isascii() else _NOT_ASCII.sub(_ascii_form, text)


def _ascii_form(m: re.Match) -> str:
    char = m[0]
    if "\uff01" <= char <= "\uff5e":   # the full-width forms of "!" to "~"
        return chr(ord(char) - 0xFEE0)
    if char in _MINUS_SIGNS:
        return "-"
    digit = unicodedata.decimal(char, None)   # what int() reads: the characters regex's \d finds
    return char if digit is None else str(digit)


def after_reasoning(text: str) -> str:
    """What a response says after its reasoning: the text after the last ``</think>``, or none
    where a ``<think>`` is never closed (the response ended mid-thought). A guess the policy
    tried while thinking is not its answer."""
    end = text.rfind("</think>")
    if end >= 0:
        return text[end + len("</think>"):]
    return "" if "<think>" in text else text


def answer_tag(text: str, tag: str = "answer") -> str | None:
    """Content of the last complete ``<tag>...</tag>`` (stripped), or None: the last closing
    tag and the last opening tag before it. Two searches from the end, so a response of
    thousands of unclosed tags costs one pass (a regex tried a match from each of them)."""
    end = text.rfind(f"</{tag}>")
    start = text.rfind(f"<{tag}>", 0, end) if end >= 0 else -1
    return text[start + len(tag) + 2:end].strip() if start >= 0 else None


def boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (or ``\fbox{...}``) with balanced braces, or None.

    One pass over the text with a stack of open braces: a response of thousands of unclosed
    boxes costs no more than its length."""
    box_starts = {m.end() for m in _BOXED.finditer(text)}  # index just after each box's "{"
    stack: list[int] = []
    best: tuple[int, int] | None = None
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i + 1)
        elif ch == "}" and stack:
            start = stack.pop()
            if start in box_starts and (best is None or start > best[0]):
                best = (start, i)
    return text[best[0]:best[1]].strip() if best is not None else None


def last_number(text: str) -> str | None:
    """The last number in the text, thousands separators removed ("1,250.5" -> "1250.5"), its
    sign and digits read however they are written ("−５" -> "-5": ``fold_unicode``)."""
    found = _NUMBER.findall(fold_unicode(text))
    return re.sub(r"[,\s]", "", found[-1]) if found else None


def last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None


def extract_answer(text: str, strategies: Sequence[str], tag: str = "answer") -> tuple[str, str] | None:
    """(answer, strategy) from the first strategy that finds one in what the response says
    after its reasoning (``after_reasoning``), or None. The answer's digits are ASCII
    (``fold_unicode``), as the answer checkers read their references.

    Strategies: ``answer_tag``, ``boxed``, ``last_number``, ``last_line``, ``full``.
    """
    text = after_reasoning(text)
    for strategy in strategies:
        if strategy == "answer_tag":
            found = answer_tag(text, tag)
        elif strategy == "boxed":
            found = boxed(text)
        elif strategy == "last_number":
            found = last_number(text)
        elif strategy == "last_line":
            found = last_line(text)
        elif strategy == "full":
            found = text.strip() or None
        else:
            raise ValueError(f"unknown extraction {strategy!r}; valid: answer_tag, boxed, last_number, "
                             "last_line, full")
        if found:
            return fold_unicode(found), strategy
    return None


# what a number may be dressed in: math-mode delimiters, formatting and spacing commands, the
# computation it came from ("3 + 4 = 7", "x \approx 7"), a lead-in ("Answer: 7"), currency, units
_WRAPPER = re.compile(r"\\(?:text(?:bf|it|rm|normal)?|math(?:rm|bf|it)|mbox|boxed|fbox)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\[,!;: ]|\\q?quad(?![A-Za-z])|\\(?:left|right|displaystyle)(?![A-Za-z])|~")
_THIN_SPACE = re.compile(r"(?<=\d)\\,(?=\d)")   # 1\,000: a thousands separator
_GROUPED = re.compile(r"^\{([^{},]*)\}$|^\(([^(),]*)\)$")   # {7}, (7); not (1,2)
# "=" or "\approx", not in a group: \sum_{k=1}^{100} k = 5050 is one computation and its result
_RESULT_AFTER = re.compile(r"(?<![<>!])=(?![^{}]*\})|\\approx(?![A-Za-z])")
# what separates a value from the next candidate ("x = 2 or x = 3", "x = 2, x = 3"): not a
# thousands separator, nor a lead-in's punctuation ("So, x = 7")
_CANDIDATES = re.compile(r"(?<=[\d})])\s*(?:,(?!\d{3}(?!\d))|;|\x00|\\(?:\\|\s)|(?:or|and)(?![A-Za-z])"
                         r"|\\(?:lor|vee|land|wedge)(?![A-Za-z]))")
_VARIABLE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]")
# what an answer's value may be named by: x, ab, x_1, a_{n}, \theta, f(2), P(A), y'
_NAME = re.compile(r"(?:[A-Za-z]\w*|\\[A-Za-z]+)(?:_\{[^{}]*\}|_\w)?(?:\([^()]*\))?'*")
_LEAD_IN = re.compile(r"^(?:\x00|[A-Za-z][A-Za-z ]*?(?:\bis|:))?\s*(?:\\?\$)?\s*")
_TEXT_WRAPPER = re.compile(r"\\(?:text(?:rm|normal)?|mathrm|mbox)\s*\{([^{}\d]*)\}")   # \text{ cm}
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
_WORD = r"(?:\x00|[A-Za-z]+(?![A-Za-z]))(?:\s*\^\s*\{?\d\}?)?"   # a whole word each: no backtracking into it
_UNITS = re.compile(rf"(?:\s*{_WORD}(?:\s*/\s*{_WORD})*)*\s*\.?\s*")
_DECIMAL = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+"
_NUMERAL = re.compile(
    r"(?P<sign>[+-]?)\s*(?:"
    rf"(?P<whole>\d+)\s*\\[dt]?frac\{{\s*(?P<mn>\d+)\s*\}}\{{\s*(?P<md>\d+)\s*\}}"        # 2\frac{1}{2}
    r"|\\[dt]?frac(?:\{\s*(?P<fn>[+-]?\d+)\s*\}\{\s*(?P<fd>\d+)\s*\}|(?P<fn1>\d)(?P<fd1>\d))"  # \frac{3}{4}, \frac34
    r"|(?P<n>\d+)\s*/\s*(?P<d>\d+)"                                                  # 3/4
    r"|10\s*\^\s*(?:\{\s*(?P<pe>[+-]?\d+)\s*\}|(?P<pe1>\d))(?![\d.])"                # 10^{6}
    rf"|(?P<dec>{_DECIMAL})(?:[eE](?P<e>[+-]?\d+)"                                  # 1,234.5, 1.5e3
    r"|\s*(?:\\times|\\cdot|\*|×)\s*10\s*\^\s*(?:\{\s*(?P<te>[+-]?\d+)\s*\}|(?P<te1>\d)))?"  # 1.5 \times 10^{3}
    r"(?P<pct>\s*\\?%)?)")
_MAX_NUMERAL_CHARS = 5000


def numeral(text: str) -> str | None:
    r"""The number ``text`` writes, in plain form (``-1234.5``, ``3/4``, ``1.5e3``, ``50%``), or
    None if it does not write one.

    A number is written as an integer or a decimal (thousands separators allowed), in
    scientific notation (``1.5e3``, ``1.5 \times 10^{3}``, ``10^{6}``), as a percentage, or as a fraction of integers (``3/4``,
    ``\frac{3}{4}``, ``2\frac{1}{2}``) that is not a whole number: ``\frac{2}{4}`` is a way to
    write a half, ``48/6`` is a division left to carry out. Dressing is dropped: ``$...$``,
    ``\text{...}``, spacing, units (``7 \text{ cm}``, ``90^\circ``, ``7 apples``), a lead-in
    (``x = 7``, ``3 + 4 = 7``, ``Answer: 7``). Anything else -- ``3+4``, ``5!``, ``2^3``, ``\sqrt{9}``,
    ``7 = 3 + 4`` -- is the computation, not its result, and None; so are candidates (``x = 2 or
    x = 3``, ``x = 2, x = 3``, ``2 = 3``), of which the last is no more the answer than the first.
    Digits in other scripts read as ASCII ones (``fold_unicode``); a number of more than 4,000
    digits, or with an exponent past 4,000, is not read.
    """
    text = _undressed(text)
    if text is None:
        return None
    *stated, text = _RESULT_AFTER.split(text)
    if any(_CANDIDATES.search(part) for part in stated) or any(_VARIABLE.search(part) for part in stated[1:]):
        return None   # x = 2 or x = 3, x = 2, x = 3, x = 2 \quad x = 3: candidates, the last no more the answer
    number = _written_number(text.strip())
    if number is not None and any(parse_number(part) not in (None, _value(number)) for part in stated):
        return None   # 2 = 3: two answers, not a computation and its result
    return number


def _undressed(text: str) -> str | None:
    """``text`` without what a number may be dressed in before its computation (``numeral``):
    math delimiters, formatting wrappers, spacing; words marked as text are ``\\x00``. None if
    it is too long to be a number."""
    text = fold_unicode(text.strip())
    if len(text) > _MAX_NUMERAL_CHARS:
        return None
    text = text.strip("$").strip()
    if text[:2] in ("\\(", "\\[") and text[-2:] in ("\\)", "\\]"):
        text = text[2:-2]
    text = _TEXT_WRAPPER.sub("\x00", text)   # words marked as text: units, whatever they say
    for _ in range(4):   # \text{\textbf{7}}; deeper is not a number
        text = _WRAPPER.sub(r"\1", text)
    return _SPACING.sub(" ", _THIN_SPACE.sub(",", text)).replace("{,}", ",")


def equation(text: str) -> bool:
    """Whether ``text`` states an equation in variables -- ``x + y = 1``, ``2x - y + 3z + 8 = 0``
    -- rather than a value after its name or computation: ``x = 7``, ``f(2) = 7``, ``3 + 4 = 7``
    (which ``numeral`` reads as 7). A reference written so is the equation, not the number on its
    right side. Variables are Latin letters outside LaTeX commands."""
    *stated, _ = _RESULT_AFTER.split(_undressed(text) or "")
    return any(_VARIABLE.search(part) and not _NAME.fullmatch(_LEAD_IN.sub("", part.strip(), count=1).strip())
               for part in stated)


def _written_number(text: str) -> str | None:
    """``numeral`` of a text without its dressing and computation."""
    text = _GROUPED.sub(r"\1\2", text)
    text = _LEAD_IN.sub("", text.strip(), count=1)
    m = _NUMERAL.match(text)
    if m is None or not _only_units(text[m.end():]):
        return None
    exponent = m["pe"] or m["pe1"] or m["e"] or m["te"] or m["te1"]
    if max(len(g) for g in m.groups("")) > _MAX_INTEGER_DIGITS or abs(int(exponent or 0)) > _MAX_INTEGER_DIGITS:
        return None   # past Python's int-from-text limit, or a number of more digits than that
    sign = "-" if m["sign"] == "-" else ""
    if m["pe"] is not None or m["pe1"] is not None:   # a power of ten is scientific notation's
        return f"{sign}1e{exponent}" + ("%" if m["pct"] else "")
    if m["whole"] is not None:
        num, den = int(m["mn"]), int(m["md"])
        if not 0 < num < den or len(m["whole"]) + len(m["md"]) > _MAX_INTEGER_DIGITS:
            return None   # whole * den + num has up to that many digits, past int-to-text's limit
        num += int(m["whole"]) * den
    elif m["dec"] is None:
        num, den = (int(m["fn"]), int(m["fd"])) if m["fn"] is not None else (
            (int(m["fn1"]), int(m["fd1"])) if m["fn1"] is not None else (int(m["n"]), int(m["d"])))
        if den == 0 or num % den == 0:
            return None
    else:
        number = sign + m["dec"].replace(",", "")
        return number + (f"e{exponent}" if exponent else "") + ("%" if m["pct"] else "")
    if num < 0:
        sign, num = ("" if sign else "-"), -num
    return f"{sign}{num}/{den}"


def _only_units(text: str) -> bool:
    """Whether what follows a number is units: words marked as text, degrees, or plain words
    math-verify knows as units (``7 apples``, ``5 km``; not ``2 pi``, ``7x``, ``2 i``)."""
    text = _DEGREES.sub(" ", text)
    return _UNITS.fullmatch(text) is not None and all(
        w == "\x00" or w in _unit_words() or (w.endswith("s") and w[:-1] in _unit_words())
        or (w.endswith("es") and w[:-2] in _unit_words()) for w in re.findall(r"[A-Za-z]+|\x00", text))


@functools.cache
def _unit_words() -> frozenset[str]:
    """math-verify's unit names (its parser drops them after a number), and currencies ("5
    dollars", as "\\$5" reads)."""
    try:
        from latex2sympy2_extended.math_normalization import units  # noqa: PLC0415 - math-verify's
    except ImportError:
        units = []
    return frozenset(u for u in units if u.isalpha()) | {"dollar", "euro"}


def parse_integer(text: str) -> int | None:
    """An integer written as ``-1234`` or ``-1,234`` (exactly, however long; ``numeral``'s
    dressing allowed); None otherwise."""
    text = numeral(text) or ""
    if not re.fullmatch(r"[+-]?\d+", text) or len(text) > _MAX_INTEGER_DIGITS:
        return None   # past Python's int-from-text limit; as a float it is inf, never equal
    return int(text)


def parse_number(text: str) -> Fraction | None:
    """The number ``text`` writes (``numeral``: ``-1,234.5``, ``3/4``, ``1e-3``, ``\\frac{3}{4}``,
    ``50%``), exactly; None otherwise, and for an expression such as ``48/6`` or ``3+4``. Exact,
    not a float: as floats ``1e-400`` and ``0`` are equal, and ``1e400`` is inf."""
    text = numeral(text)
    if text is None:
        return None
    return _value(text)


def _value(number: str) -> Fraction:
    """The value of a plain number ``numeral`` wrote."""
    value = Fraction(number.rstrip("%"))
    return value / 100 if number.endswith("%") else value

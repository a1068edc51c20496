r"""Find the final answer in a response.

    >>> extract_answer("so x = 3. <answer> 42 </answer>", ["answer_tag", "boxed"])
    ('42', 'answer_tag')
    >>> extract_answer("thus \\boxed{\\frac{1}{2}}.", ["answer_tag", "boxed"])
    ('\\frac{1}{2}', 'boxed')
    >>> extract_answer("3 apples and 1,250.5 pears", ["last_number"])
    ('1250.5', 'last_number')
    >>> extract_answer("no answer here", ["answer_tag", "boxed"]) is None
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?|-?\.\d+")
_MAX_INTEGER_DIGITS = 4000   # Python refuses int() of text over 4,300 digits
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


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
    """The last number in the text, thousands separators removed ("1,250.5" -> "1250.5")."""
    found = _NUMBER.findall(text)
    return re.sub(r"[,\s]", "", found[-1]) if found else None


def last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None


def extract_answer(text: str, strategies: Sequence[str], tag: str = "answer") -> tuple[str, str] | None:
    """(answer, strategy) from the first strategy that finds one, or None.

    Strategies: ``answer_tag``, ``boxed``, ``last_number``, ``last_line``, ``full``.
    """
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
            return found, strategy
    return None


def _bare(text: str) -> str:
    """``text`` without surrounding whitespace and ``$``, and without thousands separators
    (``-1,234.5`` -> ``-1234.5``; a comma anywhere else is left for the caller to refuse)."""
    text = text.strip().strip("$").strip()
    return text.replace(",", "") if re.fullmatch(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", text) else text


def parse_integer(text: str) -> int | None:
    """An integer written as ``-1234`` or ``-1,234`` (exactly, however long); None otherwise."""
    text = _bare(text)
    if not re.fullmatch(r"[+-]?\d+", text) or len(text) > _MAX_INTEGER_DIGITS:
        return None   # past Python's int-from-text limit; as a float it is inf, never equal
    return int(text)


def parse_number(text: str) -> float | None:
    """A number written as ``-1,234.5``, ``3/4``, ``1e-3`` or ``\\frac{3}{4}``; None otherwise."""
    text = re.sub(r"^(-?)\\[dt]?frac\{\s*([\d.]+)\s*\}\{\s*([\d.]+)\s*\}$", r"\1\2/\3", _bare(text))
    text = text.replace(" ", "")
    if text.endswith("%"):   # one percent sign: "5%%%%" is not a number (nor a recursion per sign)
        value = parse_number(text[:-1]) if not text.endswith("%%") else None
        return None if value is None else value / 100
    num, sep, den = text.partition("/")
    try:
        if sep:
            d = float(den)
            return float(num) / d if d != 0 else None
        return float(num)
    except ValueError:
        return None

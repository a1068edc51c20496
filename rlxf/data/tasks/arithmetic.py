"""Built-in task: integer arithmetic with configurable difficulty (no extra dependency).

    get_task("arithmetic", {"min_digits": 1, "max_digits": 3, "ops": "+-*", "num_operands": 2})
    # question "417+38=", answer "455"

Standard precedence (``*`` before ``+``/``-``), left to right. Answers are integer strings.
The default question format is compact ("12+345=") because tiny models have short contexts.
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlxf.data.errors import DataError
from rlxf.data.tasks.base import TaskItem, register_task
from rlxf.rewards.extract import after_reasoning

FORMATS = {"compact": "{expr}=", "question": "What is {spaced}?"}


class ArithmeticOptions(BaseModel):
    """``data.task_options`` of the ``arithmetic`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_digits: int = Field(1, ge=1, le=18, description="Fewest digits in an operand.")
    max_digits: int = Field(3, ge=1, le=18, description="Most digits in an operand (digits are drawn uniformly).")
    ops: str = Field("+-*", description="Operators to draw from, any of `+`, `-`, `*` (e.g. `+-`).")
    num_operands: int | tuple[int, int] = Field(
        2, description="Operands per problem, or [min, max] to draw the count uniformly."
    )
    allow_negative: bool = Field(True, description="Allow negative answers; false redraws problems below 0.")
    zero_pad: bool = Field(
        False,
        description="Write every operand with max_digits digits and the answer with answer_digits digits, "
        "zero-padded ('042+917=' -> '0959'): a fixed layout that small models learn column by column.",
    )
    answer_digits: int | None = Field(
        None, ge=1, le=40, description="zero_pad: digits of the answer; default max_digits + 1."
    )
    carries: tuple[int, int] | None = Field(
        None,
        description="Addition only: keep problems whose column addition carries between [min, max] times "
        "(a difficulty knob: [0, 1] easy, [2, 3] hard for 3-digit sums).",
    )
    format: str = Field(
        "compact",
        description="`compact` ('12+345='), `question` ('What is 12 + 345?'), or a format string with "
        "{expr} (no spaces) or {spaced} (spaces around operators).",
    )

    @field_validator("ops")
    @classmethod
    def _ops(cls, v: str) -> str:
        if not v or set(v) - set("+-*"):
            raise ValueError(f"ops must be a non-empty string of '+', '-', '*' (got {v!r})")
        return "".join(sorted(set(v), key="+-*".index))

    @field_validator("num_operands")
    @classmethod
    def _num(cls, v):
        lo, hi = (v, v) if isinstance(v, int) else v
        if not 2 <= lo <= hi <= 16:
            raise ValueError(f"num_operands must be an int or [min, max] with 2 <= min <= max <= 16 (got {v!r})")
        return v

    @model_validator(mode="after")
    def _digits(self) -> ArithmeticOptions:
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits={self.min_digits} > max_digits={self.max_digits}")
        if self.carries is not None:
            if self.ops != "+":
                raise ValueError(f"carries counts the carries of an addition; it needs ops '+' (got {self.ops!r})")
            if not 0 <= self.carries[0] <= self.carries[1]:
                raise ValueError(f"carries must be [min, max] with 0 <= min <= max (got {list(self.carries)})")
        if self.zero_pad and self.allow_negative and "-" in self.ops:
            raise ValueError("zero_pad writes answers without a sign; set allow_negative: false with '-'")
        template = FORMATS.get(self.format, self.format)
        if "{expr}" not in template and "{spaced}" not in template:
            raise ValueError(f"format {self.format!r} is not one of {sorted(FORMATS)} and has no {{expr}} or {{spaced}}")
        return self

    @property
    def operand_range(self) -> tuple[int, int]:
        return (self.num_operands, self.num_operands) if isinstance(self.num_operands, int) else self.num_operands


def evaluate(operands: list[int], ops: list[str]) -> int:
    """Value of ``operands[0] ops[0] operands[1] ...`` with ``*`` before ``+`` and ``-``."""
    terms, signs = [operands[0]], [1]
    for op, x in zip(ops, operands[1:], strict=True):
        if op == "*":
            terms[-1] *= x
        else:
            terms.append(x)
            signs.append(1 if op == "+" else -1)
    return sum(s * t for s, t in zip(signs, terms, strict=True))


def count_carries(operands: list[int]) -> int:
    """How many columns carry when ``operands`` are added in columns, right to left."""
    carries = carry = 0
    width = max(len(str(x)) for x in operands)
    for col in range(width):
        total = carry + sum(x // 10**col % 10 for x in operands)
        carry = total // 10
        carries += carry > 0
    return carries


_INT = re.compile(r"-?\d+")


def last_integer(text: str) -> int | None:
    """The last integer written in ``text`` (thousands separators removed), or None."""
    found = _INT.findall(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text))
    return int(found[-1]) if found else None


class ArithmeticTask:
    def __init__(self, options: dict[str, Any]):
        try:
            self.opts = ArithmeticOptions(**options)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'options'}: {err['msg']}" for err in e.errors())
            raise DataError(f"data.task_options for task 'arithmetic': {problems}. Valid options: "
                            f"{', '.join(ArithmeticOptions.model_fields)}") from None
        self.name = "arithmetic"
        self.options = self.opts.model_dump()
        self._template = FORMATS.get(self.opts.format, self.opts.format)

    def __eq__(self, other: object) -> bool:
        """Tasks with equal options draw the same problems (the key of ``_splits``)."""
        return isinstance(other, ArithmeticTask) and other.opts == self.opts

    def __hash__(self) -> int:
        return hash(self.opts)

    def _draw(self, rng: random.Random) -> TaskItem:
        o = self.opts
        for _ in range(1000):
            n = rng.randint(*o.operand_range)
            operands = []
            for _ in range(n):
                d = rng.randint(o.min_digits, o.max_digits)
                operands.append(rng.randint(0 if d == 1 else 10 ** (d - 1), 10 ** d - 1))
            ops = [rng.choice(o.ops) for _ in range(n - 1)]
            # the carries first: with carries [2, 3] most draws fail them, and need no value
            if o.carries is not None and not o.carries[0] <= count_carries(operands) <= o.carries[1]:
                continue
            value = evaluate(operands, ops)
            if not (o.allow_negative or value >= 0):
                continue
            break
        else:
            raise DataError(f"arithmetic: no problem in 1000 draws meets the options {self.options}; "
                            f"widen carries / digits or set allow_negative")
        width = o.max_digits if o.zero_pad else 0
        shown = [str(x).zfill(width) for x in operands]
        expr = "".join(f"{x}{op}" for x, op in zip(shown, ops, strict=False)) + shown[-1]
        spaced = "".join(f"{x} {op} " for x, op in zip(shown, ops, strict=False)) + shown[-1]
        answer = str(value).zfill(o.answer_digits or o.max_digits + 1) if o.zero_pad else str(value)
        return TaskItem(self._template.format(expr=expr, spaced=spaced), answer,
                        {"expression": expr, "operands": operands, "ops": ops})

    def splits(self, train_size: int, test_size: int, seed: int) -> tuple[list[TaskItem], list[TaskItem]]:
        """Test: ``test_size`` distinct problems. Train: ``train_size`` problems (repeats allowed)
        that are not test problems. Separate random streams per split, both from ``seed``.

        The same splits are drawn again and again in one process (the quickstart: every stage,
        every evaluation), and each takes up to a second: they are kept (``_splits``), keyed by
        everything they depend on, and handed out as new items each time."""
        return tuple([TaskItem(q, a, {"expression": e, "operands": list(x), "ops": list(ops)}) for q, a, e, x, ops in
                      items] for items in _splits(self, train_size, test_size, seed))

    def _split_items(self, train_size: int, test_size: int, seed: int) -> tuple[list[TaskItem], list[TaskItem]]:
        rng = random.Random(f"rlxf-arithmetic:{seed}:test")
        test: list[TaskItem] = []
        seen: set[str] = set()
        budget = 50 * test_size + 1000
        while len(test) < test_size and budget:
            budget -= 1
            item = self._draw(rng)
            if item.question not in seen:
                seen.add(item.question)
                test.append(item)
        if len(test) < test_size:
            raise DataError(f"arithmetic: only {len(test)} distinct problems found for data.test_size={test_size} "
                            f"with {self.options}; lower data.test_size or make the problems harder")
        rng = random.Random(f"rlxf-arithmetic:{seed}:train")
        train: list[TaskItem] = []
        budget = 50 * train_size + 1000
        while len(train) < train_size and budget:
            budget -= 1
            item = self._draw(rng)
            if item.question not in seen:
                train.append(item)
        if len(train) < train_size:
            raise DataError(f"arithmetic: the {test_size} test problems leave almost no training problems with "
                            f"{self.options}; lower data.test_size or make the problems harder")
        return train, test

    def score(self, response: str, ground_truth: Any, metadata: dict[str, Any]) -> float:
        """1.0 when the last integer in the response (after its reasoning: ``after_reasoning``)
        equals the answer, else 0.0."""
        got = last_integer(after_reasoning(response))
        return float(got is not None and got == int(ground_truth))


@functools.lru_cache(maxsize=8)
def _splits(task: ArithmeticTask, train_size: int, test_size: int, seed: int) -> tuple[tuple, tuple]:
    """``task``'s splits as tuples of (question, answer, expression, operands, ops); the key is the
    task by its options (``ArithmeticTask.__eq__``), the sizes and the seed."""
    return tuple(tuple((it.question, it.answer, it.metadata["expression"], tuple(it.metadata["operands"]),
                        tuple(it.metadata["ops"])) for it in items)
                 for items in task._split_items(train_size, test_size, seed))


@register_task("arithmetic", options=ArithmeticOptions)
def make_arithmetic(options: dict[str, Any]) -> ArithmeticTask:
    return ArithmeticTask(options)

"""Procedural tasks: generators of (question, answer) items with their own scorer.

    task = get_task("arithmetic", {"max_digits": 4})
    train, test = task.splits(train_size=1000, test_size=100, seed=0)   # disjoint by question
    task.score("The answer is 1234", test[0].answer, test[0].metadata)  # 1.0 or 0.0

Every task gives train and test splits that share no question; ``rlxf.data.prompts`` checks
that again for every task. A plugin registers a task with ``@register_task("name")`` on a
factory ``fn(options: dict) -> Task``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlxf.data.errors import DataError


@dataclass
class TaskItem:
    question: str                 # the prompt text shown to the model
    answer: str                   # the reference answer (ground truth for verifiers)
    metadata: dict[str, Any] = field(default_factory=dict)  # what the task's scorer needs
    ground_truth: Any = None      # what verifiers get, when not the answer text (reasoning-gym: the entry)


class Task(Protocol):
    name: str      # the spec it was made from: "arithmetic", "reasoning_gym:leg_counting"
    options: dict[str, Any]

    def splits(self, train_size: int, test_size: int, seed: int) -> tuple[list[TaskItem], list[TaskItem]]:
        """(train, test): deterministic in ``seed``; no test question appears in train."""
        ...

    def score(self, response: str, ground_truth: Any, metadata: dict[str, Any]) -> float:
        """Score a response text against a prompt's ground truth and metadata, in [0, 1]."""
        ...


TaskFactory = Callable[[dict[str, Any]], Task]
_TASKS: dict[str, TaskFactory] = {}
_OPTIONS: dict[str, type] = {}   # task name -> the pydantic model of its options, for config-docs
REASONING_GYM_PREFIX = "reasoning_gym:"


def register_task(name: str, options: type | None = None) -> Callable[[TaskFactory], TaskFactory]:
    """Register ``factory(options) -> Task`` under ``name`` (at import time); ``options``, the
    pydantic model the factory checks its options with, documents them in ``rlxf config-docs``."""
    def deco(factory: TaskFactory) -> TaskFactory:
        if name in _TASKS and _TASKS[name] is not factory:
            raise ValueError(f"task {name!r} is already registered")
        _TASKS[name] = factory
        if options is not None:
            _OPTIONS[name] = options
        return factory
    return deco


def task_option_models() -> dict[str, type]:
    """The options model of each registered task that declared one, by task name."""
    return dict(sorted(_OPTIONS.items()))


def task_names() -> list[str]:
    return sorted(_TASKS) + [f"{REASONING_GYM_PREFIX}<dataset>"]


def get_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """The task ``name`` made with ``options`` (checked by the task; unknown options are errors)."""
    options = dict(options or {})
    if name.startswith(REASONING_GYM_PREFIX):
        from rlxf.data.tasks.reasoning_gym import ReasoningGymTask

        return ReasoningGymTask(name.removeprefix(REASONING_GYM_PREFIX), options)
    if name not in _TASKS:
        raise DataError(f"unknown task {name!r} (data.task); valid tasks: {', '.join(task_names())}")
    return _TASKS[name](options)


def check_disjoint(train: list[TaskItem], test: list[TaskItem], name: str) -> None:
    """Raise if a test question also appears in train (a bug in the task's ``splits``)."""
    held_out = {item.question for item in test}
    leaked = [item.question for item in train if item.question in held_out]
    if leaked:
        raise DataError(f"task {name!r}: {len(leaked)} training questions are also test questions "
                        f"(first: {leaked[0]!r}); the task's splits are not disjoint")

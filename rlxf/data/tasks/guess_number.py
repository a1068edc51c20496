"""Built-in task: secrets for the ``guess_number`` environment (``rlxf.envs.builtin``).

    get_task("guess_number", {"low": 1, "high": 16})   # question "Game 3: guess my number from 1 to 16", answer "11"

Each item is one game; its answer is the secret, drawn uniformly from [low, high]. Test games
are numbered below ``test_size`` and training games from there on, so the splits share no
question (the secrets themselves repeat: what is learned is the search, not the numbers).
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlxf.data.errors import DataError
from rlxf.data.tasks.arithmetic import last_integer
from rlxf.data.tasks.base import TaskItem, register_task
from rlxf.rewards.extract import after_reasoning


class GuessNumberOptions(BaseModel):
    """``data.task_options`` of the ``guess_number`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: int = Field(1, description="Smallest secret.")
    high: int = Field(16, description="Largest secret (above low).")


class GuessNumberTask:
    def __init__(self, options: dict[str, Any]):
        try:
            opts = GuessNumberOptions(**options)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'options'}: {err['msg']}" for err in e.errors())
            raise DataError(f"data.task_options for task 'guess_number': {problems}. Valid options: "
                            f"{', '.join(GuessNumberOptions.model_fields)}") from None
        self.low, self.high = opts.low, opts.high
        if self.low >= self.high:
            raise DataError(f"data.task_options for task 'guess_number': low={self.low} must be below high={self.high}")
        self.name = "guess_number"
        self.options = opts.model_dump()

    def _items(self, first: int, count: int, rng: random.Random) -> list[TaskItem]:
        return [TaskItem(f"Game {i}: guess my number from {self.low} to {self.high}",
                         str(rng.randint(self.low, self.high))) for i in range(first, first + count)]

    def splits(self, train_size: int, test_size: int, seed: int) -> tuple[list[TaskItem], list[TaskItem]]:
        test = self._items(0, test_size, random.Random(f"rlxf-guess-number:{seed}:test"))
        train = self._items(test_size, train_size, random.Random(f"rlxf-guess-number:{seed}:train"))
        return train, test

    def score(self, response: str, ground_truth: Any, metadata: dict[str, Any]) -> float:
        """1.0 when the last integer in the response (after its reasoning) is the secret."""
        return float(last_integer(after_reasoning(response)) == int(ground_truth))


@register_task("guess_number", options=GuessNumberOptions)
def make_guess_number(options: dict[str, Any]) -> GuessNumberTask:
    return GuessNumberTask(options)

"""Any reasoning-gym dataset as a task, scored by its own ``score_answer`` (needs ``rlxf[tasks]``).

    get_task("reasoning_gym:leg_counting", {"min_animals": 2})

reasoning-gym seeds item i of a dataset with ``Random(seed + i)``: the datasets for seeds 1
and 2 are the same items shifted by one, so a different seed is *not* different data. The test
split therefore takes seeds ``seed .. seed + test_size - 1`` and the training stream starts at
``seed + test_size``; any training item whose question equals a test question is dropped
(small problem spaces repeat questions under different seeds), and the stream continues
until ``train_size`` items are found.
"""

from __future__ import annotations

from typing import Any

from rlxf.data.errors import DataError
from rlxf.data.tasks.base import TaskItem
from rlxf.rewards.extract import answer_tag
from rlxf.rewards.reasoning_gym import score_answer_safely


def _rg():
    try:
        import reasoning_gym
    except ImportError:
        raise DataError("reasoning_gym tasks need reasoning-gym: pip install 'rlxf[tasks]'") from None
    return reasoning_gym


class ReasoningGymTask:
    def __init__(self, dataset: str, options: dict[str, Any]):
        rg = _rg()
        from reasoning_gym.factory import DATASETS

        if dataset not in DATASETS:
            raise DataError(f"unknown reasoning-gym dataset {dataset!r} (data.task=reasoning_gym:{dataset}); "
                            f"valid: {', '.join(sorted(DATASETS))}")
        bad = sorted({"seed", "size"} & set(options))
        if bad:
            raise DataError(f"data.task_options {bad} are set by rlxf for reasoning-gym; use run.seed and "
                            f"data.train_size / data.test_size instead")
        self.dataset = dataset
        self.name = f"reasoning_gym:{dataset}"
        self.options = dict(options)
        try:
            self._scorer = rg.create_dataset(dataset, seed=0, size=1, **self.options)
        except (TypeError, ValueError, AssertionError) as e:
            valid = sorted(getattr(DATASETS[dataset][1], "__dataclass_fields__", {}))
            raise DataError(f"reasoning-gym dataset {dataset!r} rejects data.task_options {self.options}: {e}. "
                            f"Its options: {', '.join(v for v in valid if v not in ('seed', 'size'))}") from None

    def _items(self, seed: int, size: int) -> list[dict[str, Any]]:
        ds = _rg().create_dataset(self.dataset, seed=seed, size=size, **self.options)
        return [ds[i] for i in range(size)]

    def _item(self, entry: dict[str, Any]) -> TaskItem:
        return TaskItem(str(entry["question"]), str(entry["answer"]), ground_truth=entry)

    def splits(self, train_size: int, test_size: int, seed: int) -> tuple[list[TaskItem], list[TaskItem]]:
        test = [self._item(e) for e in self._items(seed, test_size)]
        held_out = {t.question for t in test}
        train: list[TaskItem] = []
        start, chunk = seed + test_size, max(train_size, 64)
        limit = seed + test_size + 10 * train_size + 1000
        while len(train) < train_size and start < limit:
            for entry in self._items(start, chunk):
                if entry["question"] not in held_out and len(train) < train_size:
                    train.append(self._item(entry))
            start += chunk
        if len(train) < train_size:
            raise DataError(f"reasoning-gym {self.dataset}: too few questions outside the test split for "
                            f"data.train_size={train_size}; lower data.train_size or data.test_size")
        return train, test

    def score(self, response: str, ground_truth: Any, metadata: dict[str, Any]) -> float:
        """The dataset's own ``score_answer(answer, entry)``; ``ground_truth`` is the entry, the
        answer is the response's last <answer>...</answer> (or the whole response without tags); an
        answer the scorer would run as code, or that makes it raise, scores 0
        (``rlxf.rewards.reasoning_gym.score_answer_safely``)."""
        tagged = answer_tag(response)
        text = tagged if tagged is not None else response.strip()
        return score_answer_safely(self._scorer, text, ground_truth)[0]

"""Any reasoning-gym dataset as a task, scored by its own ``score_answer`` (needs ``rlxf[tasks]``).

    get_task("reasoning_gym:leg_counting", {"min_animals": 2})

reasoning-gym seeds item i of a dataset with ``Random(seed + i)``: the datasets for seeds 1
and 2 are the same items shifted by one, so a different seed is *not* different data. The test
split therefore takes seeds ``seed .. seed + test_size - 1`` and the training stream starts at
``seed + test_size``; any training item whose question equals a test question is dropped
(small problem spaces repeat questions under different seeds), and the stream continues
until ``train_size`` items are found.

An item whose reference answer sympy left unevaluated (``3*Integral(x**3*cos(3*x), x) + C``:
reasoning-gym's intermediate_integration builds ``cos`` there as an undefined function) is left
out of both splits, counted in a warning: its reference restates the question, so SFT on it
teaches restating, and a verifier comparing with it rewards restating. The streams continue
past it, so the splits keep their sizes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from rlxf.data.errors import DataError
from rlxf.data.tasks.base import TaskItem
from rlxf.rewards.extract import after_reasoning, answer_tag
from rlxf.rewards.reasoning_gym import parses_with_sympy, score_answer_safely, unevaluated_operator

log = logging.getLogger("rlxf.data")


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
        if dataset == "composite":   # its options are reasoning-gym objects (DatasetSpec), which YAML cannot write
            raise DataError("data.task=reasoning_gym:composite is not supported: to mix reasoning-gym datasets, "
                            "give each its own entry in data.sources (task: reasoning_gym:<dataset>, weight: ...)")
        bad = sorted({"seed", "size"} & set(options))
        if bad:
            raise DataError(f"data.task_options {bad} are set by rlxf for reasoning-gym; use run.seed and "
                            f"data.train_size / data.test_size instead")
        self.dataset = dataset
        self.name = f"reasoning_gym:{dataset}"
        self.options = dict(options)
        try:
            self._scorer = rg.create_dataset(dataset, seed=0, size=1, **self.options)
            self._scorer[0]   # some options pass the constructor and break every item
        except Exception as e:  # noqa: BLE001 - each dataset checks its options its own way
            valid = sorted(getattr(DATASETS[dataset][1], "__dataclass_fields__", {}))
            raise DataError(f"reasoning-gym dataset {dataset!r} rejects data.task_options {self.options}: {e}. "
                            f"Its options: {', '.join(v for v in valid if v not in ('seed', 'size'))}") from None

    def _items(self, seed: int, size: int) -> Iterator[dict[str, Any]]:
        ds = _rg().create_dataset(self.dataset, seed=seed, size=size, **self.options)
        return (ds[i] for i in range(size))   # made as read: none past the last one kept

    def _item(self, entry: dict[str, Any]) -> TaskItem:
        return TaskItem(str(entry["question"]), str(entry["answer"]), ground_truth=entry)

    def _take(self, start: int, size: int, keep: Callable[[dict[str, Any]], bool]) -> tuple[list[TaskItem], int]:
        """The first ``size`` entries from seed ``start`` on that ``keep`` accepts (fewer if the
        stream runs ``10 * size + 1000`` seeds without finding them), and the seed after the last read."""
        taken: list[TaskItem] = []
        limit, chunk = start + 10 * size + 1000, max(size, 64)
        while len(taken) < size and start < limit:
            for entry in self._items(start, min(chunk, limit - start)):
                start += 1
                if keep(entry):
                    taken.append(self._item(entry))
                    if len(taken) == size:
                        break
        return taken, start

    def splits(self, train_size: int, test_size: int, seed: int) -> tuple[list[TaskItem], list[TaskItem]]:
        sympy_reference = parses_with_sympy(self._scorer)
        unevaluated: list[str] = []

        def solved(entry: dict[str, Any]) -> bool:
            if sympy_reference and unevaluated_operator(str(entry["answer"])):
                unevaluated.append(str(entry["answer"]))
                return False
            return True

        test, start = self._take(seed, test_size, solved)
        held_out = {t.question for t in test}
        train, _ = self._take(start, train_size, lambda e: solved(e) and e["question"] not in held_out)
        if unevaluated:
            log.warning("reasoning-gym %s: left out %d items whose reference answer sympy left unevaluated "
                        "(first: %r): it restates the question, so it can neither teach nor check an answer",
                        self.dataset, len(unevaluated), unevaluated[0])
        if len(test) < test_size:
            raise DataError(f"reasoning-gym {self.dataset}: only {len(test)} items with an evaluated reference "
                            f"answer for data.test_size={test_size}; lower data.test_size or change data.task_options")
        if len(train) < train_size:
            raise DataError(f"reasoning-gym {self.dataset}: too few questions outside the test split for "
                            f"data.train_size={train_size}; lower data.train_size or data.test_size")
        return train, test

    def score(self, response: str, ground_truth: Any, metadata: dict[str, Any]) -> float:
        """The dataset's own ``score_answer(answer, entry)``; ``ground_truth`` is the entry, the
        answer is the response's last <answer>...</answer> (or the whole response without tags), after
        its reasoning (``rlxf.rewards.extract.after_reasoning``); an
        answer the scorer would run as code, or that makes it raise, scores 0
        (``rlxf.rewards.reasoning_gym.score_answer_safely``)."""
        said = after_reasoning(response)
        tagged = answer_tag(said)
        text = tagged if tagged is not None else said.strip()
        return score_answer_safely(self._scorer, text, ground_truth)[0]

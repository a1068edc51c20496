"""Score reasoning-gym tasks with the task's own scorer.

The sample's ground truth is the reasoning-gym entry (``{"question", "answer", "metadata"}``)
as the dataset produced it. The dataset is looked up by, in order: the entry's
``metadata["source_dataset"]`` (reasoning-gym sets it), the sample metadata's
``reasoning_gym_dataset``, or a ``task`` of the form ``reasoning_gym:<name>``, or the
verifier's ``dataset`` option. Dataset options (some scorers depend on them) come from the
sample metadata's ``task_options`` (``rlxf.data`` puts ``task`` and ``task_options`` there).
The score is ``dataset.score_answer(answer, entry)`` in [0, 1], where the answer is the text
of the last ``<answer>...</answer>`` (the format reasoning-gym's prompts ask for), or the
whole response if it has no tag -- the same rule as ``rlxf.data``'s task scorer, so rewards
and task accuracy agree -- unless ``require_tag``.
"""

from __future__ import annotations

import json
from typing import Any

from rlxf.rewards.base import SyncVerifier
from rlxf.rewards.extract import answer_tag as tag_content
from rlxf.rewards.types import RewardInput, RewardResult


class ReasoningGymVerifier(SyncVerifier):
    def __init__(self, name: str, answer_tag: str | None = "answer", dataset: str | None = None,
                 require_tag: bool = False):
        super().__init__(name)
        try:
            import reasoning_gym  # noqa: PLC0415
        except ImportError as e:
            raise ImportError("the reasoning_gym verifier needs reasoning-gym: pip install 'rlxf[tasks]'") from e
        self._rg = reasoning_gym
        self.answer_tag = answer_tag
        self.require_tag = require_tag
        self.dataset = dataset
        self._datasets: dict[tuple[str, str], Any] = {}

    @classmethod
    def from_config(cls, cfg: Any) -> ReasoningGymVerifier:
        return cls(cfg.label, cfg.answer_tag, cfg.dataset, cfg.require_tag)

    def _name(self, entry: dict[str, Any], metadata: dict[str, Any]) -> str | None:
        name = (entry.get("metadata") or {}).get("source_dataset") or metadata.get("reasoning_gym_dataset")
        task = metadata.get("task")
        if not name and isinstance(task, str) and task.startswith("reasoning_gym:"):
            name = task.partition(":")[2]
        return name or self.dataset

    def _scorer(self, name: str, options: dict[str, Any]) -> Any:
        key = (name, json.dumps(options, sort_keys=True, default=str))
        if key not in self._datasets:
            try:  # one item is enough: only its score_answer is used
                self._datasets[key] = self._rg.create_dataset(name, seed=0, size=1, **options)
            except (ValueError, TypeError, AssertionError):
                if not options:
                    raise
                # options meant for the generator (not its config): the default config scores the same
                self._datasets[key] = self._rg.create_dataset(name, seed=0, size=1)
        return self._datasets[key]

    def score(self, x: RewardInput) -> RewardResult:
        entry = x.ground_truth
        if not isinstance(entry, dict) or "answer" not in entry:
            return RewardResult.failed("the ground truth is not a reasoning-gym entry {question, answer, metadata}")
        name = self._name(entry, x.metadata)
        if not name:
            return RewardResult.failed("cannot tell which reasoning-gym dataset this entry is from: no "
                                       "metadata.source_dataset, no task, no `dataset` option")
        dataset = self._scorer(name, dict(x.metadata.get("task_options") or {}))
        answer = tag_content(x.response, self.answer_tag) if self.answer_tag else None
        tagged = answer is not None
        if answer is None:
            if self.require_tag and self.answer_tag:
                return RewardResult(0.0, {"tagged": 0.0, "correct": 0.0})
            answer = x.response.strip()
        value = float(dataset.score_answer(answer, entry))
        return RewardResult(value, {"tagged": float(tagged), "correct": float(value >= 1.0)})

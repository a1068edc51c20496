"""Curriculum by measured difficulty: skip prompts the policy always or never solves.

    curriculum = Curriculum(cfg.data.curriculum, seed=cfg.seeds.data, num_prompts=len(data.train))
    prompts = curriculum.draw(sampler, 16)   # the sampler's next prompts, flagged ones skipped
    curriculum.observe(trajs)                # each group's pass rate updates its prompt's record
    metrics = curriculum.step_metrics()      # curriculum/skipped_solved, ..._unsolved, flagged

A group whose samples are all correct, or all wrong, has zero advantage under GRPO: it costs
a rollout and teaches nothing. DAPO's dynamic sampling drops such groups after sampling them;
online difficulty filtering (Polaris and others) skips the prompt before sampling, using its
pass rate in earlier epochs. A prompt is flagged when its last ``window`` groups were all solved
(every sample correct) or all unsolved (none correct), and each of them had no signal: its
rewards all equal. A group whose rewards differ (partial credit, a length or format term, a
reward model) teaches GRPO something whatever its pass rate, so it is recorded as ``None`` and
never flags its prompt; nor do samples of failed episodes (no token of the model's) count.
A flagged prompt is skipped when the
sampler gives it out, or kept with probability ``keep_fraction`` (a down-weight). A skipped
prompt is not sampled, so its record does not change: it stays skipped for the run.

The records and the draw counter are the state a checkpoint saves, so a resumed run skips
exactly what the uninterrupted run would have.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from rlxf.config.data import CurriculumConfig
from rlxf.data.sampler import Sampler
from rlxf.types import Prompt, Trajectory


class Curriculum:
    def __init__(self, cfg: CurriculumConfig, seed: int, num_prompts: int):
        self.cfg = cfg
        self.seed = seed
        self.num_prompts = num_prompts   # skips allowed in a row before a flagged prompt is taken anyway
        self.history: dict[str, list[float | None]] = {}  # uid -> pass rates of its last `window`
        # groups; None for a group whose rewards differed (it had signal)
        self.draws = 0                    # prompts the sampler has given out through draw()
        self._skipped: Counter = Counter()

    def verdict(self, uid: str) -> str | None:
        """``solved`` / ``unsolved`` when the prompt's last ``window`` groups were all that (and
        the config skips it), else None."""
        rates = self.history.get(uid)
        if rates is None or len(rates) < self.cfg.window:
            return None
        if any(r is None for r in rates):
            return None
        if self.cfg.skip_solved and all(r >= 1.0 for r in rates):
            return "solved"
        if self.cfg.skip_unsolved and all(r <= 0.0 for r in rates):
            return "unsolved"
        return None

    def draw(self, sampler: Sampler, n: int) -> list[Prompt]:
        """The sampler's next ``n`` prompts that are not skipped. After ``num_prompts`` skips in a
        row (every prompt flagged) the flagged prompt is taken, counted as ``exhausted``."""
        out: list[Prompt] = []
        in_a_row = 0
        while len(out) < n:
            (prompt,) = sampler.next_batch(1)
            self.draws += 1
            verdict = self.verdict(prompt.uid)
            keep = random.Random(f"rlxf-curriculum:{self.seed}:{self.draws}").random() < self.cfg.keep_fraction
            if verdict is None or keep:
                out.append(prompt)
                in_a_row = 0
            elif in_a_row >= self.num_prompts:
                self._skipped["exhausted"] += 1
                out.append(prompt)
            else:
                self._skipped[verdict] += 1
                in_a_row += 1
        return out

    def observe(self, trajs: list[Trajectory]) -> None:
        """Record each group's pass rate (fraction of its samples judged correct) for its prompt,
        or None when its rewards differ. Samples of failed episodes (no model token) are left
        out; a group of only those records nothing."""
        groups: dict[int, list[Trajectory]] = {}
        for t in trajs:
            if any(t.loss_mask):
                groups.setdefault(t.group, []).append(t)
        for members in groups.values():
            agree = len({t.reward for t in members}) == 1
            rate = sum(bool(t.correct) for t in members) / len(members) if agree else None
            rates = self.history.setdefault(members[0].prompt.uid, [])
            rates.append(rate)
            del rates[: -self.cfg.window]

    def step_metrics(self) -> dict[str, float]:
        """Prompts skipped since the last call (solved / unsolved / taken because all were
        flagged) and how many prompts are flagged now."""
        flagged = sum(self.verdict(uid) is not None for uid in self.history)
        out = {"curriculum/skipped_solved": float(self._skipped["solved"]),
               "curriculum/skipped_unsolved": float(self._skipped["unsolved"]),
               "curriculum/flagged": float(flagged)}
        if self._skipped["exhausted"]:
            out["curriculum/exhausted"] = float(self._skipped["exhausted"])
        self._skipped.clear()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"history": {uid: list(r) for uid, r in self.history.items()}, "draws": self.draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = {uid: list(r) for uid, r in state["history"].items()}
        self.draws = int(state["draws"])

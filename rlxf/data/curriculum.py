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

In a mixture a skipped prompt is replaced by the next prompt of the same source, so the
weights hold for the prompts trained on (``curriculum/<source>/share``), not only for those
given out: otherwise a source the policy has mastered would lose its share to the others.

The records and the draw counter are the state a checkpoint saves, so a resumed run skips
exactly what the uninterrupted run would have.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Any

from rlxf.config.data import CurriculumConfig
from rlxf.data.sampler import MixtureSampler, PromptSampler, Sampler
from rlxf.types import Prompt, Trajectory

log = logging.getLogger("rlxf.data")


class Curriculum:
    def __init__(self, cfg: CurriculumConfig, seed: int, num_prompts: int):
        self.cfg = cfg
        self.seed = seed
        self.num_prompts = num_prompts   # skips allowed in a row before a flagged prompt is taken anyway
        self.history: dict[str, list[float | None]] = {}  # uid -> pass rates of its last `window`
        # groups; None for a group whose rewards differed (it had signal)
        self.draws = 0                    # prompts the sampler has given out through draw()
        self._skipped: Counter = Counter()
        self._sources: list[str] = []     # a mixture's source names, for the per-source metrics
        self._per_source: Counter = Counter()  # (source, taken / skipped / exhausted), since step_metrics()
        self._warned: set[str] = set()

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
        """The sampler's next ``n`` prompts that are not skipped; a mixture's skipped prompt is
        replaced from its own source. After as many skips in a row from one source as it has
        prompts (every one flagged) the flagged prompt is taken, counted as ``exhausted``."""
        if isinstance(sampler, MixtureSampler):
            self._sources = sampler.names
        out: list[Prompt] = []
        in_a_row: Counter = Counter()   # per source: a source of mastered prompts runs out alone
        for _ in range(n):
            source = sampler.next_source() if isinstance(sampler, MixtureSampler) else sampler
            out.append(self._take(source, in_a_row))
        return out

    def _take(self, source: PromptSampler, in_a_row: Counter) -> Prompt:
        """The next prompt of ``source`` that is not skipped (or the exhausted one)."""
        name = source.stream if isinstance(source, PromptSampler) else ""
        limit = len(source.prompts) if name else self.num_prompts
        while True:
            (prompt,) = source.next_batch(1)
            self.draws += 1
            verdict = self.verdict(prompt.uid)
            keep = random.Random(f"rlxf-curriculum:{self.seed}:{self.draws}").random() < self.cfg.keep_fraction
            if verdict is None or keep:
                in_a_row[name] = 0
                break
            if in_a_row[name] >= limit:
                self._exhausted(name)
                break
            self._skipped[verdict] += 1
            self._per_source[name, "skipped"] += 1
            in_a_row[name] += 1
        self._per_source[name, "taken"] += 1
        return prompt

    def _exhausted(self, name: str) -> None:
        self._skipped["exhausted"] += 1
        self._per_source[name, "exhausted"] += 1
        if name not in self._warned:
            self._warned.add(name)
            where = f"data.sources[{name}]" if name else "the training data"
            log.warning("curriculum: every prompt of %s is flagged (solved or unsolved in its last %d groups), so "
                        "flagged prompts are trained on anyway (curriculum/%sexhausted): they are all too easy or "
                        "too hard for the policy now; give harder or easier ones%s", where, self.cfg.window,
                        f"{name}/" if name else "", ", or lower its weight" if name else "")

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
        flagged) and how many prompts are flagged now; in a mixture, also each source's share
        of the prompts taken and its skips."""
        flagged = sum(self.verdict(uid) is not None for uid in self.history)
        out = {"curriculum/skipped_solved": float(self._skipped["solved"]),
               "curriculum/skipped_unsolved": float(self._skipped["unsolved"]),
               "curriculum/flagged": float(flagged)}
        if self._skipped["exhausted"]:
            out["curriculum/exhausted"] = float(self._skipped["exhausted"])
        per = self._per_source
        taken = sum(per[name, "taken"] for name in self._sources)
        for name in self._sources:   # a mixture: each source's share of the prompts taken
            out[f"curriculum/{name}/share"] = per[name, "taken"] / taken if taken else 0.0
            out[f"curriculum/{name}/skipped"] = float(per[name, "skipped"])
            if per[name, "exhausted"]:
                out[f"curriculum/{name}/exhausted"] = float(per[name, "exhausted"])
        self._skipped.clear()
        per.clear()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"history": {uid: list(r) for uid, r in self.history.items()}, "draws": self.draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = {uid: list(r) for uid, r in state["history"].items()}
        self.draws = int(state["draws"])

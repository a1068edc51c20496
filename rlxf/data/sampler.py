"""Deterministic, resumable order of training prompts.

    sampler = PromptSampler(data.train, seed=cfg.seeds.data, shuffle=cfg.data.shuffle)
    batch = sampler.next_batch(16)            # crosses epoch boundaries seamlessly
    state = sampler.state_dict()               # saved with each checkpoint
    sampler.load_state_dict(state)             # a resumed run continues with the next unseen prompt

Epoch e visits every prompt once in the order of a permutation drawn from ``(seed, e)``, so
the order depends only on the seed and the prompt list, never on the run's history.

A mixture (``build_sampler`` with ``PromptData.weights``) keeps one ``PromptSampler`` per
source and ``MixtureSampler`` picks which source gives each next prompt, by weight.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import Any

from rlxf.data.errors import DataError
from rlxf.types import Prompt, source_of

TARGETS = ("response_ids", "chosen_ids", "rejected_ids")  # what SFT and preference examples train towards


def fingerprint(prompts: Sequence[Prompt]) -> str:
    """A short hash of the examples' uids and ids, their targets included (an SFT example's
    response, a pair's chosen and rejected ones): a resumed run must see the same data, and a
    pairs file relabelled or with chosen and rejected swapped is not the same data."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(p.uid.encode())
        h.update(b"\0")
        h.update(",".join(map(str, p.prompt_ids)).encode())
        for name in TARGETS:
            if (ids := getattr(p, name, None)) is not None:
                h.update(f"\0{name}:".encode() + ",".join(map(str, ids)).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


class PromptSampler:
    def __init__(self, prompts: Sequence[Prompt], seed: int, shuffle: bool = True, stream: str = ""):
        if not prompts:
            raise DataError("PromptSampler got no prompts; the training data is empty")
        self.stream = stream   # a mixture source's name: its own permutations, independent of the others
        self.prompts = list(prompts)
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0      # index into this epoch's order of the next prompt to give out
        self._fingerprint = fingerprint(self.prompts)
        self._order = self._epoch_order(0)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.prompts)))
        if self.shuffle:
            key = f"rlxf-sampler:{self.seed}:{epoch}" + (f":{self.stream}" if self.stream else "")
            random.Random(key).shuffle(order)
        return order

    @property
    def consumed(self) -> int:
        """Prompts handed out since the start of the run."""
        return self.epoch * len(self.prompts) + self.position

    def next_batch(self, n: int) -> list[Prompt]:
        """The next ``n`` prompts (a batch may span two epochs)."""
        out = []
        for _ in range(n):
            if self.position == len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._epoch_order(self.epoch)
            out.append(self.prompts[self._order[self.position]])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "shuffle": self.shuffle, "epoch": self.epoch, "position": self.position,
                "num_prompts": len(self.prompts), "fingerprint": self._fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` left off; refuses a state saved for different prompts."""
        mismatch = [k for k in ("seed", "shuffle", "num_prompts", "fingerprint")
                    if state.get(k) != {"seed": self.seed, "shuffle": self.shuffle,
                                        "num_prompts": len(self.prompts), "fingerprint": self._fingerprint}[k]]
        if mismatch:
            raise DataError(
                f"cannot resume the prompt order: the checkpoint's {', '.join(mismatch)} differ from this run's "
                f"(saved {[state.get(k) for k in mismatch]}); resume with the same data config, tokenizer and run.seed / run.data_seed"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._epoch_order(self.epoch)


def mixture_counts(weights: Sequence[float], n: int) -> list[int]:
    """How many of the first ``n`` draws each source gives under ``MixtureSampler``'s rule."""
    counts = [0] * len(weights)
    for k in range(n):
        counts[_next_source(weights, counts, k)] += 1
    return counts


def _next_source(weights: Sequence[float], counts: Sequence[int], k: int) -> int:
    """The source of draw t = k + 1, by Tijdeman's rule for m sources: among those at least
    s = 1/(2m - 2) behind their share (t·w_i/W - c_i >= s), the one whose deadline comes first,
    (c_i + 1 - s)·W/w_i, the lowest index on a tie. Every prefix of the draws then holds each
    source's count to within 1 - s of its share (Tijdeman, "The chairman assignment problem",
    1980): within one prompt, so no batch's mix drifts from the weights. For two sources it is
    the "furthest behind its share" rule, draw for draw; for more that rule is not enough
    (weights 87, 87, 3.5, 3.5, 3.5, 3.375 put a source 1.07 prompts behind at draw 147)."""
    m = len(weights)
    if m == 1:
        return 0
    total, t, s = sum(weights), k + 1, 1 / (2 * m - 2)
    behind = [t * w / total - c for w, c in zip(weights, counts)]
    # the shortfalls sum to 1, so the largest is >= 1/m >= s and some source is due; the max is
    # there for when rounding puts two sources' halves a hair under s = 1/2
    due = [i for i in range(m) if behind[i] >= s] or [max(range(m), key=lambda i: (behind[i], -i))]
    return min(due, key=lambda i: ((counts[i] + 1 - s) * total / weights[i], i))


class MixtureSampler:
    """Prompts from several sources in proportion to their weights, deterministically.

    The i-th prompt comes from the source Tijdeman's rule picks (``_next_source``: every
    prefix holds each share to within one prompt), and from that source's own
    ``PromptSampler`` (its own shuffled epochs). A batch of 16 from
    weights 3:1 holds 12 and 4, every time, where independent draws would give the second
    source a binomial count (mean 4, standard deviation 1.7). The state is the per-source samplers' and counts, so a
    resumed run continues the same sequence mid-mixture.
    """

    def __init__(self, prompts: Sequence[Prompt], weights: dict[str, float], seed: int, shuffle: bool = True):
        for p in prompts:
            if source_of(p.uid) not in weights:
                raise DataError(f"prompt {p.uid} is from source {source_of(p.uid)!r}, which has no weight in the "
                                f"mixture ({', '.join(weights)})")
        bad = {name: w for name, w in weights.items() if not (math.isfinite(w) and w >= 0)}
        if bad or not math.isfinite(sum(weights.values())):
            raise DataError(f"mixture weights {bad or weights} (data.sources[].weight): each must be a finite number "
                            f">= 0, and their sum finite (only the ratios matter: 3 and 1 draw as 0.75 and 0.25)")
        weights = {name: w for name, w in weights.items() if w > 0}   # weight 0: evaluated, never drawn
        by_source: dict[str, list[Prompt]] = {name: [] for name in weights}
        for p in prompts:
            if source_of(p.uid) in by_source:
                by_source[source_of(p.uid)].append(p)
        empty = [name for name, ps in by_source.items() if not ps]
        if empty:
            raise DataError(f"mixture sources {empty} have no training prompts")
        self.names = list(weights)
        self.weights = [float(weights[n]) for n in self.names]
        self.samplers = [PromptSampler(by_source[n], seed, shuffle, stream=n) for n in self.names]
        self.counts = [0] * len(self.names)

    @property
    def consumed(self) -> int:
        """Slots filled since the start of the run (with a curriculum: prompts taken, not skipped)."""
        return sum(self.counts)

    @property
    def prompts(self) -> list[Prompt]:
        """Every source's prompts (as ``PromptSampler.prompts``: the ones it draws from)."""
        return [p for s in self.samplers for p in s.prompts]

    def next_source(self) -> PromptSampler:
        """The source of the next slot, counted as drawn; the caller takes the slot's prompt from it.
        A curriculum that skips a prompt takes the next one from the same source, so the
        shares hold for the prompts trained on, not only for those given out."""
        i = _next_source(self.weights, self.counts, self.consumed)
        self.counts[i] += 1
        return self.samplers[i]

    def next_batch(self, n: int) -> list[Prompt]:
        return [p for _ in range(n) for p in self.next_source().next_batch(1)]

    def state_dict(self) -> dict[str, Any]:
        return {"mixture": {name: {"weight": w, "drawn": c, "sampler": s.state_dict()}
                            for name, w, c, s in zip(self.names, self.weights, self.counts, self.samplers)}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` left off; refuses a state saved for another mixture."""
        saved = state.get("mixture")
        if saved is None or list(saved) != self.names or [saved[n]["weight"] for n in self.names] != self.weights:
            was = {n: v["weight"] for n, v in saved.items()} if saved else "a single source"
            raise DataError(f"cannot resume the prompt order: the checkpoint's mixture ({was}) differs from this "
                            f"run's ({dict(zip(self.names, self.weights))}); resume with the same data.sources")
        for i, name in enumerate(self.names):
            self.samplers[i].load_state_dict(saved[name]["sampler"])
            self.counts[i] = int(saved[name]["drawn"])


Sampler = PromptSampler | MixtureSampler


def build_sampler(prompts: Sequence[Prompt], weights: dict[str, float] | None, seed: int,
                  shuffle: bool = True) -> PromptSampler | MixtureSampler:
    """The training prompt order: one source's ``PromptSampler``, or a ``MixtureSampler``."""
    if weights is None:
        return PromptSampler(prompts, seed, shuffle)
    return MixtureSampler(prompts, weights, seed, shuffle)

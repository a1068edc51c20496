"""Deterministic, resumable order of training prompts.

    sampler = PromptSampler(data.train, seed=cfg.seeds.data, shuffle=cfg.data.shuffle)
    batch = sampler.next_batch(16)            # crosses epoch boundaries seamlessly
    state = sampler.state_dict()               # saved with each checkpoint
    sampler.load_state_dict(state)             # a resumed run continues with the next unseen prompt

Epoch e visits every prompt once in the order of a permutation drawn from ``(seed, e)``, so
the order depends only on the seed and the prompt list, never on the run's history.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

from rlxf.data.errors import DataError
from rlxf.types import Prompt


def fingerprint(prompts: Sequence[Prompt]) -> str:
    """A short hash of the prompts' uids and ids: a resumed run must see the same data."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(p.uid.encode())
        h.update(b"\0")
        h.update(",".join(map(str, p.prompt_ids)).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


class PromptSampler:
    def __init__(self, prompts: Sequence[Prompt], seed: int, shuffle: bool = True):
        if not prompts:
            raise DataError("PromptSampler got no prompts; the training data is empty")
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
            random.Random(f"rlxf-sampler:{self.seed}:{epoch}").shuffle(order)
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

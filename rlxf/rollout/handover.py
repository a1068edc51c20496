"""New weights for an engine that is generating in another thread (a Ray engine actor).

    engine = WeightHandover(build_engine(...))
    thread A:  engine.generate(requests, sampling)            # long: many decode steps
    thread B:  engine.update_weights(weights.items(), 3)      # returns at once: handed over
               → loaded by thread A before its next decode step; the sequences still decoding
                 continue under version 3 and their later tokens carry it (a partial rollout)

The copy into the engine never runs while a decode step reads the weights: a call in progress
loads handed-over weights itself, between two decode steps (``DecodeHooks.between_steps``), and
an idle engine loads them at once, under the same lock that a call takes to start. Only the
newest of several handed-over versions is loaded.

An engine that cannot load weights mid-call loads them when the call ends: the ``hf`` backend
(``model.generate`` has no hook between steps), and a native call with several CPU decode
workers (the others would read the weights while one copies them; ``EngineOptions.threads``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import torch

from rlxf.rollout.base import DecodeHooks, RequestLike, SamplingParams
from rlxf.types import Completion


class WeightHandover:
    """An ``Engine`` whose ``update_weights`` may be called while ``generate`` runs (see the
    module docstring). ``generate`` calls must not overlap each other (one engine, one call)."""

    def __init__(self, engine):
        self.engine = engine
        self.received = -1   # the newest version handed over (loaded, or waiting to be)
        self._pending: tuple[list[tuple[str, torch.Tensor]], int] | None = None
        self._generating = False
        self._lock = threading.Condition(threading.RLock())

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load at once when no call runs; else hand over to the call (loaded before its next step)."""
        with self._lock:
            self.received = int(version)
            self._lock.notify_all()
            if self._generating:
                self._pending = (list(named_tensors), int(version))
            else:
                self.engine.update_weights(named_tensors, version)

    def wait_for(self, version: int, timeout: float | None = None) -> bool:
        """Block until ``version`` has been handed over (or ``timeout`` seconds passed: False).
        Weights sent to an actor before a generate call may reach a thread of their own after
        that call starts; waiting here keeps the order in which they were sent."""
        with self._lock:
            return self._lock.wait_for(lambda: self.received >= version, timeout)

    def generate(self, requests: Sequence[RequestLike], sampling: SamplingParams) -> list[list[Completion]]:
        with self._lock:
            self._generating = True
        try:
            if self._swaps_mid_call(len(requests)):
                return self.engine.generate(requests, sampling, DecodeHooks(between_steps=self._load_pending))
            return self.engine.generate(requests, sampling)
        finally:
            with self._lock:   # (re-entrant) one hold: a newer version cannot slip in before this one
                self._generating = False
                self._load_pending()

    def _swaps_mid_call(self, num_requests: int) -> bool:
        return self.engine.name == "native" and self.engine.workers_for(num_requests) == 1

    def _load_pending(self) -> None:
        with self._lock:
            if self._pending is not None:
                weights, version = self._pending
                self._pending = None
                self.engine.update_weights(weights, version)

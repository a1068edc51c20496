"""The engine as a stream of groups: what ``rollout.mode: async`` asks of a placement
(``Placement.stream``).

    stream = placement.stream()
    stream.submit([GroupRequest(prompt, seed, group=7), ...], sampling)   # returns at once
    stream.ready(timeout=None)   # -> groups finished since the last call: (7, trajectories),
                                 #    unscored, carrying per-token policy versions

Two implementations here: ``InlineStream`` generates what was submitted when asked for ready
groups (any placement; nothing overlaps), ``EngineStream`` drives an engine that runs on its own
(``rlxf.rollout.process.EngineProcess`` under ``local``), so the engine samples while the trainer
trains. The consumer side (staleness, dynamic sampling, metrics) is ``rlxf.trainer.stream``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlxf.rollout import GenerationRequest, SamplingParams
from rlxf.types import Completion, Prompt, Trajectory

log = logging.getLogger("rlxf")

if TYPE_CHECKING:
    from rlxf.trainer.collect import Rollout


@dataclass(frozen=True)
class GroupRequest:
    """One prompt to sample ``sampling.n`` responses for, with its seed and the caller's group id."""

    prompt: Prompt
    seed: int
    group: int          # becomes the trajectories' ``group``: the caller's handle on the request


class GroupStream(ABC):
    """Prompts in, groups of trajectories out, in the order they finish."""

    @abstractmethod
    def submit(self, requests: list[GroupRequest], sampling: SamplingParams) -> None:
        """Queue these prompts; returns without waiting for them."""

    @abstractmethod
    def ready(self, timeout: float | None = None) -> list[tuple[int, list[Trajectory]]]:
        """The groups finished since the last call, as (the request's ``group``, its unscored
        trajectories: none when the engine failed the request); waits up to ``timeout`` seconds
        (None: as long as it takes) for at least one when none is there yet."""

    def engine_stats(self) -> dict[str, float]:
        """Running totals of the engine side: ``engine_idle_s`` (seconds it waited for
        requests) and ``engine_restarts``, where the stream can tell."""
        return {}


class InlineStream(GroupStream):
    """A stream over ``generate`` (a placement's): submitted prompts are generated, all in one call,
    when ready groups are asked for. Rollout and training take turns as in sync mode; what
    the trainer consumes still obeys the staleness bound."""

    def __init__(self, rollout: Rollout):
        self.rollout = rollout
        self.queued: list[tuple[GroupRequest, SamplingParams]] = []

    def submit(self, requests: list[GroupRequest], sampling: SamplingParams) -> None:
        self.queued += [(r, sampling) for r in requests]

    def ready(self, timeout: float | None = None) -> list[tuple[int, list[Trajectory]]]:
        out: list[tuple[int, list[Trajectory]]] = []
        while self.queued:
            sampling = self.queued[0][1]
            batch = [r for r, s in self.queued if s == sampling]
            self.queued = [(r, s) for r, s in self.queued if s != sampling]
            trajs = self.rollout.generate([r.prompt for r in batch], [r.seed for r in batch], sampling)
            by_index = {}
            for t in trajs:  # generate numbers groups by position; give back the callers' ids
                by_index.setdefault(t.group, []).append(t)
            for i, r in enumerate(batch):
                group = by_index.get(i, [])
                for t in group:
                    t.group = r.group
                out.append((r.group, group))
        return out


class EngineStream(GroupStream):
    """A stream over an engine that decodes on its own (``EngineProcess``: ``submit`` returns
    an id at once, ``ready`` gives back finished (id, completions))."""

    def __init__(self, engine: Any, tokenizer: Any):
        self.engine = engine
        self.tokenizer = tokenizer
        self.asked: dict[int, GroupRequest] = {}

    def submit(self, requests: list[GroupRequest], sampling: SamplingParams) -> None:
        for r in requests:
            self.asked[self.engine.submit(GenerationRequest(r.prompt.prompt_ids, seed=r.seed), sampling)] = r

    def ready(self, timeout: float | None = None) -> list[tuple[int, list[Trajectory]]]:
        out = []
        for rid, completions in self.engine.ready(timeout):
            r = self.asked.pop(rid)
            out.append((r.group, trajectories_of(r.prompt, r.group, completions, self.tokenizer)))
        return out

    def engine_stats(self) -> dict[str, float]:
        return engine_process_stats(self.engine)


def engine_process_stats(engine: Any) -> dict[str, float]:
    """``GroupStream.engine_stats`` of an engine that runs in its own process (``EngineProcess``)."""
    return {"engine_idle_s": engine.idle_seconds(), "engine_restarts": float(engine.restarts)}


def trajectories_of(prompt: Prompt, group: int, completions: list[Completion], tokenizer) -> list[Trajectory]:
    """One prompt's completions as unscored trajectories (a failed request yields none). The
    response text keeps tool-call markers that a tokenizer flags special (``reply_text``)."""
    from rlxf.models.tokenizer import control_tokens, reply_text

    trajs, control = [], control_tokens(tokenizer)
    for c in completions:
        if c.finish_reason == "error":
            log.warning("prompt %s failed in the engine: %s", prompt.uid, c.error)
            continue
        trajs.append(Trajectory(
            prompt=prompt, group=group, response_ids=list(c.response_ids),
            response_text=reply_text(tokenizer, c.response_ids, control),
            rollout_logprobs=list(c.logprobs), loss_mask=[1] * len(c.response_ids),
            policy_versions=c.versions(), finish_reason=c.finish_reason,
        ))
    return trajs

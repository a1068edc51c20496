"""Where each step's groups come from: ``rollout.mode: sync`` or ``async``.

    batches = step_batches(cfg, placement, sampler, sampling, first_step=1)
    trajs, metrics = batches.next(step, timer)        # in the loop, once per step

``sync``: ``collect`` samples this step's prompts from the weights the previous step produced
and waits for them (rollout and training take turns).

``async`` (AReaL, slime, ROLL, verl's async trainers): the engine keeps sampling while the
trainer trains. Between them is a bounded buffer of scored groups:

    producer   prompts go to the engine (``placement.stream()``) whenever the buffer has room:
               at most (k + 1) x prompts_per_step groups are in flight or waiting
    arrival    each group is scored as it comes back; with dynamic sampling (DAPO) a group whose
               rewards all agree is dropped at once and its room goes to a new prompt, while
               the step's refills last (``max_sampling_rounds - 1`` x prompts_per_step); after
               that it fills its place in the batch but is not trained on, as in sync mode
    consumer   the trainer takes a step as soon as prompts_per_step groups are waiting

The trainer is at version s - 1 when it trains step s (version = steps trained; the engine's
weights carry the same numbers). A group's staleness is s - 1 - v, where v is the version of
its oldest token; a group with staleness > k = ``rollout.max_staleness`` is never trained on:
it is dropped and counted (``async/dropped_stale``). With k = 0 no prompt of step s + 1 is
submitted before the weights of step s are in the engine, so a run is the same, number for
number, as ``sync`` (with dynamic sampling only for ``max_sampling_rounds: 1``: refills are
sent as groups are dropped, not in rounds). ``StalenessBuffer`` is that bookkeeping alone, free of engines and clocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from rlxf.algorithms import dynamic_sampling_keep
from rlxf.config import Config
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.reward import RewardConfig
from rlxf.data import PromptSampler
from rlxf.rollout import SamplingParams
from rlxf.rollout.stream import GroupRequest, GroupStream
from rlxf.trainer.collect import batch_metrics_of, check_reward_failures, collect
from rlxf.trainer.seeds import derive_seed
from rlxf.trainer.timer import PhaseTimer
from rlxf.types import Trajectory

if TYPE_CHECKING:
    from rlxf.data.curriculum import Curriculum
    from rlxf.placement.base import Placement


@dataclass
class ReadyGroup:
    """A scored group waiting to be trained on."""

    order: int          # submission index: a step's groups are trained on in submission order
    version: int        # the weights version of the group's oldest token
    item: Any           # the group (its trajectories)
    informative: bool = True  # False: its rewards agree, kept only because no refill was left (DAPO)


@dataclass
class StalenessBuffer:
    """The bounded buffer between engine and trainer, and the staleness rule (pure bookkeeping).

    ``room()`` is how many more groups the producer may submit: in flight plus waiting stays
    within (k + 1) x ``groups_per_step``. ``take(trainer_version)`` first drops every waiting
    group whose oldest token is more than k versions behind ``trainer_version``, then returns
    the ``groups_per_step`` that arrived first (in submission order), or None while too few wait.
    """

    groups_per_step: int
    max_staleness: int
    outstanding: int = 0                # submitted and neither taken nor dropped
    waiting: list[ReadyGroup] = field(default_factory=list)  # arrival order
    dropped_stale: int = 0              # running total

    @property
    def capacity(self) -> int:
        return (self.max_staleness + 1) * self.groups_per_step

    def room(self) -> int:
        return self.capacity - self.outstanding

    def submitted(self, count: int) -> None:
        if count > self.room():
            raise ValueError(f"submitted {count} groups with room for {self.room()}")
        self.outstanding += count

    def arrived(self, group: ReadyGroup | None) -> None:
        """A submitted group came back: kept (``group``), or None when it was discarded
        (dynamic sampling), which frees its room."""
        if group is None:
            self.outstanding -= 1
        else:
            self.waiting.append(group)

    def take(self, trainer_version: int) -> list[ReadyGroup] | None:
        fresh = [g for g in self.waiting if trainer_version - g.version <= self.max_staleness]
        stale = len(self.waiting) - len(fresh)
        self.dropped_stale += stale
        self.outstanding -= stale
        self.waiting = fresh
        if len(fresh) < self.groups_per_step:
            return None
        batch, self.waiting = fresh[: self.groups_per_step], fresh[self.groups_per_step:]
        self.outstanding -= len(batch)
        return sorted(batch, key=lambda g: g.order)


class SyncBatches:
    """``rollout.mode: sync``: each step collects its own groups (``collect``)."""

    def __init__(self, cfg: Config, placement: Placement, sampler: PromptSampler, sampling: SamplingParams,
                 curriculum: Curriculum | None = None):
        self.cfg, self.placement, self.sampler, self.sampling = cfg, placement, sampler, sampling
        self.curriculum = curriculum

    def next(self, step: int, timer: PhaseTimer) -> tuple[list[Trajectory], dict[str, float]]:
        return collect(self.placement, self.sampler, self.sampling, self.cfg.algorithm,
                       prompts_per_step=self.cfg.train.prompts_per_step, seed=self.cfg.seeds.sampling,
                       step=step, timer=timer, reward=self.cfg.reward, curriculum=self.curriculum)


class AsyncBatches:
    """``rollout.mode: async``: groups stream from the engine into a ``StalenessBuffer``.

    Seeds: the q-th prompt submitted samples with ``derive_seed(seed, q // P + 1, 0, q % P)``
    (P = prompts per step), which is what sync mode gives prompt i of step s when nothing is
    dropped. On resume, q restarts at (step) x P; groups in flight at the checkpoint are lost
    (their prompts are not drawn again).
    """

    def __init__(self, stream: GroupStream, score: Callable[[list[Trajectory], int], dict[str, float]],
                 sampler: PromptSampler, sampling: SamplingParams, algo: AlgorithmConfig, *, prompts_per_step: int,
                 max_staleness: int, seed: int, reward: RewardConfig | None = None, first_step: int = 1):
        self.stream, self.score, self.sampler, self.sampling = stream, score, sampler, sampling
        self.algo, self.reward_cfg, self.seed = algo, reward, seed
        self.per_step = prompts_per_step
        self.buffer = StalenessBuffer(prompts_per_step, max_staleness)
        self.submitted = (first_step - 1) * self.per_step
        self.since = time.perf_counter()         # end of the previous take: the step's wall clock
        self.engine_before = stream.engine_stats()
        self.dropped_before = 0
        self._reset_step()

    def _reset_step(self) -> None:
        self.discarded: list[Trajectory] = []    # dropped by dynamic sampling since the last step
        self.discards = 0
        self.failures: dict[str, float] = {}

    def next(self, step: int, timer: PhaseTimer) -> tuple[list[Trajectory], dict[str, float]]:
        waited = 0.0
        with timer("reward"):  # what finished while the trainer trained
            for group in self.stream.ready(timeout=0):
                self._arrive(group)
        fill = len(self.buffer.waiting) / self.buffer.capacity  # what the trainer finds when it asks
        while True:
            self._submit()
            batch = self.buffer.take(trainer_version=step - 1)
            if batch is not None:
                break
            t0 = time.perf_counter()
            with timer("rollout"):  # waiting for the engine: the trainer's idle time
                groups = self.stream.ready(timeout=None)
            waited += time.perf_counter() - t0
            with timer("reward"):
                for group in groups:
                    self._arrive(group)
        for i, g in enumerate(batch):  # a step's groups are numbered 0.. as in sync mode
            for t in g.item:
                t.group = i
        sampled = [t for g in batch for t in g.item] + self.discarded
        # groups whose rewards agree are not trained on; when no group disagrees, all are (as
        # sync: the update then changes nothing but keeps its metrics)
        trajs = [t for g in batch if g.informative for t in g.item] or [t for g in batch for t in g.item]
        metrics = self._metrics(step, batch, trajs, sampled, waited, fill)
        if self.reward_cfg is not None:
            check_reward_failures(sampled, step, self.reward_cfg)
        self._reset_step()
        return trajs, metrics

    def _submit(self) -> None:
        room = self.buffer.room()
        if room <= 0:
            return
        prompts = self.sampler.next_batch(room)
        p, first = self.per_step, self.submitted
        requests = [GroupRequest(prompt, derive_seed(self.seed, (first + i) // p + 1, 0, (first + i) % p), first + i)
                    for i, prompt in enumerate(prompts)]
        self.stream.submit(requests, self.sampling)
        self.buffer.submitted(len(requests))
        self.submitted += len(requests)

    def _arrive(self, group: list[Trajectory]) -> None:
        if not group:  # the engine failed the request (logged): its room goes to a new prompt
            self.buffer.arrived(None)
            return
        for key, value in self.score(group, self.sampling.max_new_tokens).items():
            if key.endswith(("errors", "timeouts", "crashes")):
                self.failures[key] = self.failures.get(key, 0.0) + value
        # DAPO: a group whose rewards agree teaches nothing; drop it and sample another prompt,
        # at most (max_sampling_rounds - 1) x prompts_per_step times per step (as sync's rounds)
        informative = True
        if self.algo.dynamic_sampling:
            rewards = torch.tensor([t.reward for t in group])
            informative = bool(dynamic_sampling_keep(rewards, torch.zeros(len(group), dtype=torch.long)).any())
            if not informative and self.discards < (self.algo.max_sampling_rounds - 1) * self.per_step:
                self.discards += 1
                self.discarded += group
                self.buffer.arrived(None)
                return
        oldest = min(min(t.policy_versions, default=0) for t in group)
        self.buffer.arrived(ReadyGroup(order=group[0].group, version=oldest, item=group, informative=informative))

    def _metrics(self, step: int, batch: list[ReadyGroup], trajs: list[Trajectory], sampled: list[Trajectory],
                 waited: float, fill: float) -> dict[str, float]:
        now = time.perf_counter()
        wall, self.since = max(now - self.since, 1e-9), now
        # rewards and accuracy of everything sampled: the policy's performance, not the filtered batch's
        metrics = batch_metrics_of(sampled) | self.failures
        if self.algo.dynamic_sampling:
            informative = sum(len(g.item) for g in batch if g.informative)
            metrics |= {"sampling/prompts_drawn": float(len(batch) + self.discards),
                        "sampling/kept_frac": informative / max(1, len(sampled))}
        staleness = [step - 1 - g.version for g in batch]
        metrics |= {f"async/staleness_{j}": staleness.count(j) / len(batch) for j in range(self.buffer.max_staleness + 1)}
        metrics |= {
            "async/staleness_mean": sum(staleness) / len(batch),
            "async/staleness_max": float(max(staleness)),
            "async/dropped_stale": float(self.buffer.dropped_stale - self.dropped_before),
            "async/buffer_fill": fill,
            "async/trainer_idle_frac": min(1.0, waited / wall),
            "async/partial_frac": sum(len(set(t.policy_versions)) > 1 for t in trajs) / max(1, len(trajs)),
        }
        self.dropped_before = self.buffer.dropped_stale
        engine = self.stream.engine_stats()
        if "engine_idle_s" in engine:
            idle = engine["engine_idle_s"] - self.engine_before.get("engine_idle_s", 0.0)
            metrics["async/engine_idle_frac"] = min(1.0, max(0.0, idle / wall))
        if "engine_restarts" in engine:
            metrics["async/engine_restarts"] = engine["engine_restarts"]
        self.engine_before = engine
        return metrics


def step_batches(cfg: Config, placement: Placement, sampler: PromptSampler, sampling: SamplingParams, *,
                 first_step: int = 1, curriculum: Curriculum | None = None) -> SyncBatches | AsyncBatches:
    """The source of each step's groups that ``rollout.mode`` asks for (a curriculum: sync only)."""
    if cfg.rollout.mode == "async":
        return AsyncBatches(placement.stream(), placement.score, sampler, sampling, cfg.algorithm,
                            prompts_per_step=cfg.train.prompts_per_step, max_staleness=cfg.rollout.max_staleness,
                            seed=cfg.seeds.sampling, reward=cfg.reward, first_step=first_step)
    return SyncBatches(cfg, placement, sampler, sampling, curriculum)

"""Where each step's groups come from: ``rollout.mode: sync`` or ``async``.

    batches = step_batches(cfg, placement, sampler, sampling)
    trajs, metrics = batches.next(step, timer)        # in the loop, once per step
    batches.in_flight                                 # what a checkpoint keeps of it (or None)

``sync``: ``collect`` samples this step's prompts from the weights the previous step produced
and waits for them (rollout and training take turns).

``async`` (AReaL, slime, ROLL, verl's async trainers): the engine keeps sampling while the
trainer trains. Between them is a bounded buffer of scored groups:

    producer   prompts go to the engine (``placement.stream()``) whenever the buffer has room:
               at most (k + 1) x prompts_per_step groups are in flight or waiting
    arrival    each group is scored as it comes back; with dynamic sampling (DAPO) a group whose
               rewards all agree is dropped, and once every group of its round is back, the
               round's dropped groups are replaced by new prompts (sync mode's rounds, up to
               ``max_sampling_rounds``); in the last round it fills its place in the batch but
               is not trained on, as in sync mode
    consumer   the trainer takes a step as soon as prompts_per_step groups are waiting

The trainer is at version s - 1 when it trains step s (version = steps trained; the engine's
weights carry the same numbers). A group's staleness is s - 1 - v, where v is the version of
its oldest token; a group with staleness > k = ``rollout.max_staleness`` is never trained on:
it is dropped and counted (``async/dropped_stale``). With k = 0 no prompt of step s + 1 is
drawn before step s is taken, and each prompt is seeded by its place in sync mode's sampling
(``Draw``), so a run is the same, number for number, as ``sync``, dynamic sampling included.
``StalenessBuffer`` (the staleness rule) and ``Draws`` (what is drawn and out, DAPO's rounds,
what a checkpoint keeps) are that bookkeeping alone, free of engines and clocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlxf.config import Config
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.reward import RewardConfig
from rlxf.data import Sampler
from rlxf.data.errors import DataError
from rlxf.rollout import SamplingParams
from rlxf.rollout.stream import GroupRequest, GroupStream
from rlxf.trainer.collect import (
    batch_metrics_of,
    check_reward_failures,
    collect,
    identical_group_frac,
    informative_samples,
)
from rlxf.trainer.seeds import derive_seed
from rlxf.trainer.timer import PhaseTimer
from rlxf.types import Prompt, Trajectory

if TYPE_CHECKING:
    from rlxf.data.curriculum import Curriculum
    from rlxf.placement.base import Placement


@dataclass
class ReadyGroup:
    """A scored group waiting to be trained on."""

    order: int          # draw index: a step's groups are trained on in the order their prompts were drawn
    version: int | None  # the weights version of its oldest token (None: no tokens, the engine failed it)
    item: Any           # the group (its trajectories)
    informative: bool = True  # False: its rewards agree (or it failed), kept only because no round was left
    round: int = 0      # the dynamic-sampling round its prompt was drawn in


@dataclass
class StalenessBuffer:
    """The bounded buffer between engine and trainer, and the staleness rule (pure bookkeeping).

    ``room()`` is how many more groups the producer may submit: in flight plus waiting stays
    within (k + 1) x ``groups_per_step``. ``take(trainer_version)`` first drops every waiting
    group whose oldest token is more than k versions behind ``trainer_version``, then returns
    the ``groups_per_step`` that arrived first (sorted in draw order), or None while too few wait.
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

    def arrived(self, group: ReadyGroup) -> None:
        """A submitted group came back to be trained on (its room is freed when it is taken)."""
        self.waiting.append(group)

    def take(self, trainer_version: int) -> list[ReadyGroup] | None:
        fresh = [g for g in self.waiting
                 if g.version is None or trainer_version - g.version <= self.max_staleness]
        stale = len(self.waiting) - len(fresh)
        self.dropped_stale += stale
        self.outstanding -= stale
        self.waiting = fresh
        if len(fresh) < self.groups_per_step:
            return None
        batch, self.waiting = fresh[: self.groups_per_step], fresh[self.groups_per_step:]
        self.outstanding -= len(batch)
        return sorted(batch, key=lambda g: g.order)


@dataclass(frozen=True)
class Draw:
    """A prompt's place in sync mode's sampling: drawn for step ``step``'s batch, in DAPO's
    sampling round ``round``, as the round's ``index``-th prompt. Sync mode samples that prompt
    with the seed ``derive_seed(seed, step, round, index)``, and so does async mode."""

    step: int
    round: int
    index: int


@dataclass
class Tally:
    """The prompts of one (step, round): round 0, and DAPO's rounds of replacements after it."""

    drawn: int = 0      # prompts drawn into it so far (the next one's index)
    pending: int = 0    # submitted and not back yet
    drops: int = 0      # back with rewards that all agree (or failed), to be replaced when all are back


class Draws:
    """The prompts drawn and not yet trained on, each with its place (``Draw``), and DAPO's
    rounds (pure bookkeeping: no engine, no clock). It fills the ``StalenessBuffer`` it is given.

    Round 0 of step s is the s-th block of P = ``groups_per_step`` prompts drawn (the q-th is
    prompt q mod P of step q // P + 1), drawn while the buffer has room. A group of round
    r < R - 1 (R = ``rounds``) whose rewards all agree, or that the engine failed, keeps its
    room until every group of its round drawn so far is back; then all such groups are replaced
    at once by as many new prompts of round r + 1: sync mode's rounds, prompt for prompt. In
    the last round such a group takes its place in the batch but is not trained on. With k = 0
    room frees a whole step at a time, so each round 0 is drawn whole, a step's rounds are all
    drawn before the next step's round 0, and the sampler gives out the same prompts in the same
    order as in sync mode. (With k >= 1 a group dropped as stale frees its room alone, so a round
    0 may be drawn in parts; each part is replaced as it completes, so no room is held forever.)

    ``state_dict`` is what a checkpoint keeps: the prompts out (in flight, or scored and
    waiting), by uid with their places, the open rounds and the counters. After
    ``load_state_dict`` those prompts are submitted again first, with the same seeds, and
    sampled again from the resumed weights (docs/async.md says why).
    """

    def __init__(self, sampler: Sampler, buffer: StalenessBuffer, *, rounds: int, seed: int):
        self.sampler, self.buffer, self.rounds, self.seed = sampler, buffer, rounds, seed
        self.per_step = buffer.groups_per_step
        self.firsts = 0      # round-0 prompts drawn so far
        self.count = 0       # prompts drawn so far: the next prompt's ``order``
        self.out: dict[int, tuple[Prompt, Draw]] = {}    # order -> drawn, neither trained on nor dropped
        self.tallies: dict[tuple[int, int], Tally] = {}  # (step, round) -> its tally, while the step is open
        self.unsent: list[int] = []  # drawn and not yet submitted: a round's replacements, or resumed

    def requests(self) -> list[GroupRequest]:
        """What to submit now: what was drawn and not yet sent, then new round-0 prompts while
        the buffer has room (replacements take the room of the groups they replace)."""
        while (room := self.buffer.room()) > 0:
            step, index = self.firsts // self.per_step + 1, self.firsts % self.per_step
            count = min(room, self.per_step - index)
            self.buffer.submitted(count)
            self.unsent += self._draw(count, step, 0)
            self.firsts += count
        sent, self.unsent = self.unsent, []
        return [self._request(order) for order in sent]

    def arrived(self, order: int, group: list[Trajectory], informative: bool) -> tuple[Draw, bool]:
        """Group ``order`` is back (scored; empty when the engine failed it). Returns its place,
        and whether it went to the buffer (False: dropped, to be replaced in the next round)."""
        _, draw = self.out[order]
        tally = self.tallies[draw.step, draw.round]
        tally.pending -= 1
        kept = informative or draw.round + 1 >= self.rounds
        if kept:
            # the oldest version of any sampled token: an empty response has none (and is no older
            # than its group), a group of nothing but empty responses none at all (never stale);
            # an environment's tokens (loss mask 0, version -1) were sampled by no policy
            oldest = min((v for t in group for v, m in zip(t.policy_versions, t.loss_mask, strict=True) if m),
                         default=None)
            self.buffer.arrived(ReadyGroup(order, oldest, group, informative, draw.round))
        else:
            del self.out[order]
            tally.drops += 1
        if tally.drops and tally.pending == 0:  # all of the round drawn so far is back
            self.unsent += self._draw(tally.drops, draw.step, draw.round + 1)
            tally.drops = 0
        return draw, kept

    def take(self, trainer_version: int) -> list[ReadyGroup] | None:
        """``StalenessBuffer.take``; what it takes or drops as stale is no longer out."""
        waiting = {g.order for g in self.buffer.waiting}
        batch = self.buffer.take(trainer_version)
        for order in waiting - {g.order for g in self.buffer.waiting}:
            del self.out[order]
        open_steps = {draw.step for _, draw in self.out.values()}
        done = {s for (s, r), t in self.tallies.items() if r == 0 and t.drawn == self.per_step} - open_steps
        self.tallies = {key: t for key, t in self.tallies.items() if key[0] not in done}
        return batch

    def _draw(self, count: int, step: int, round: int) -> list[int]:
        tally = self.tallies.setdefault((step, round), Tally())
        orders = []
        for prompt in self.sampler.next_batch(count):
            self.out[self.count] = (prompt, Draw(step, round, tally.drawn))
            tally.drawn += 1
            tally.pending += 1
            orders.append(self.count)
            self.count += 1
        return orders

    def _request(self, order: int) -> GroupRequest:
        prompt, d = self.out[order]
        return GroupRequest(prompt, derive_seed(self.seed, d.step, d.round, d.index), order)

    def state_dict(self) -> dict[str, Any]:
        return {"firsts": self.firsts, "count": self.count,
                "out": [[order, prompt.uid, d.step, d.round, d.index] for order, (prompt, d) in sorted(self.out.items())],
                "tallies": [[step, rnd, t.drawn, t.drops] for (step, rnd), t in sorted(self.tallies.items())]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: every prompt out then is sent again before any new one is drawn."""
        prompts = {p.uid: p for p in self.sampler.prompts}
        missing = [uid for _, uid, *_ in state["out"] if uid not in prompts]
        if missing:
            raise DataError(f"the checkpoint's in-flight prompts {missing[:3]} are not in this run's training "
                            f"data; resume with the data config the run was started with")
        self.firsts, self.count = int(state["firsts"]), int(state["count"])
        self.out = {order: (prompts[uid], Draw(step, rnd, index)) for order, uid, step, rnd, index in state["out"]}
        self.tallies = {(step, rnd): Tally(drawn, 0, drops) for step, rnd, drawn, drops in state["tallies"]}
        for _, d in self.out.values():
            self.tallies[d.step, d.round].pending += 1
        self.unsent = sorted(self.out)
        self.buffer.waiting = []
        self.buffer.outstanding = len(self.out) + sum(t.drops for t in self.tallies.values())


class SyncBatches:
    """``rollout.mode: sync``: each step collects its own groups (``collect``)."""

    in_flight = None  # every prompt drawn is trained on (or dropped) in the step that draws it

    def __init__(self, cfg: Config, placement: Placement, sampler: Sampler, sampling: SamplingParams,
                 curriculum: Curriculum | None = None):
        self.cfg, self.placement, self.sampler, self.sampling = cfg, placement, sampler, sampling
        self.curriculum = curriculum

    def next(self, step: int, timer: PhaseTimer) -> tuple[list[Trajectory], dict[str, float]]:
        return collect(self.placement, self.sampler, self.sampling, self.cfg.algorithm,
                       prompts_per_step=self.cfg.train.prompts_per_step, seed=self.cfg.seeds.sampling,
                       step=step, timer=timer, reward=self.cfg.reward, curriculum=self.curriculum)


class AsyncBatches:
    """``rollout.mode: async``: groups stream from the engine into a ``StalenessBuffer``,
    fed by ``Draws``, whose state a checkpoint keeps (``in_flight``)."""

    def __init__(self, stream: GroupStream, score: Callable[[list[Trajectory], int], dict[str, float]],
                 sampler: Sampler, sampling: SamplingParams, algo: AlgorithmConfig, *, prompts_per_step: int,
                 max_staleness: int, seed: int, reward: RewardConfig | None = None):
        self.stream, self.score, self.sampling, self.algo, self.reward_cfg = stream, score, sampling, algo, reward
        self.buffer = StalenessBuffer(prompts_per_step, max_staleness)
        rounds = algo.max_sampling_rounds if algo.dynamic_sampling else 1
        self.in_flight = Draws(sampler, self.buffer, rounds=rounds, seed=seed)
        self.since = time.perf_counter()         # end of the previous take: the step's wall clock
        self.engine_before = stream.engine_stats()
        self.dropped_before = 0
        self.failure_keys: set[str] = set()  # every failure count logged so far: 0 on a step none arrived in
        self._reset_step()

    def _reset_step(self) -> None:
        self.discarded: list[tuple[int, int, list[Trajectory]]] = []  # (order, round, group) dropped since the last step
        self.failures: dict[str, float] = {}

    def next(self, step: int, timer: PhaseTimer) -> tuple[list[Trajectory], dict[str, float]]:
        waited = 0.0
        with timer("reward"):  # what finished while the trainer trained
            self._arrive(self.stream.ready(timeout=0))
        fill = len(self.buffer.waiting) / self.buffer.capacity  # what the trainer finds when it asks
        while True:
            requests = self.in_flight.requests()
            if requests:
                self.stream.submit(requests, self.sampling)
            batch = self.in_flight.take(trainer_version=step - 1)
            if batch is not None:
                break
            t0 = time.perf_counter()
            with timer("rollout"):  # waiting for the engine: the trainer's idle time
                groups = self.stream.ready(timeout=None)
            waited += time.perf_counter() - t0
            with timer("reward"):
                self._arrive(groups)
        # everything the step sampled, in draw order, numbered 0.. as sync mode numbers a step's groups
        sampled = sorted([(g.order, g.round, g.item) for g in batch] + self.discarded, key=lambda x: x[0])
        for i, (_, _, group) in enumerate(sampled):
            for t in group:
                t.group = i
        generated = [t for _, _, group in sampled for t in group]
        # groups whose rewards agree are not trained on; when no group disagrees, all are (as
        # sync: the update then changes nothing but keeps its metrics)
        trajs = [t for g in batch if g.informative for t in g.item] or [t for g in batch for t in g.item]
        metrics = self._metrics(step, batch, trajs, sampled, generated, waited, fill)
        if self.reward_cfg is not None:
            check_reward_failures(generated, step, self.reward_cfg)
        self._reset_step()
        return trajs, metrics

    def _arrive(self, groups: list[tuple[int, list[Trajectory]]]) -> None:
        for order, group in groups:
            if group:
                for key, value in self.score(group, self.sampling.max_new_tokens).items():
                    if key.endswith(("errors", "timeouts", "crashes")):
                        self.failures[key] = self.failures.get(key, 0.0) + value
            # DAPO: a group whose rewards agree teaches nothing (every advantage is 0)
            informative = bool(group)
            if group and self.algo.dynamic_sampling:
                informative = any(informative_samples(group, self.algo.mask_truncated))
            draw, kept = self.in_flight.arrived(order, group, informative)
            if not kept:
                self.discarded.append((order, draw.round, group))

    def _metrics(self, step: int, batch: list[ReadyGroup], trajs: list[Trajectory],
                 sampled: list[tuple[int, int, list[Trajectory]]], generated: list[Trajectory],
                 waited: float, fill: float) -> dict[str, float]:
        now = time.perf_counter()
        wall, self.since = max(now - self.since, 1e-9), now
        # rewards and accuracy of everything sampled: the policy's performance, not the filtered batch's
        self.failure_keys |= self.failures.keys()
        metrics = batch_metrics_of(generated) | dict.fromkeys(self.failure_keys, 0.0) | self.failures
        if self.algo.dynamic_sampling:
            informative = sum(len(g.item) for g in batch if g.informative)
            metrics |= {"sampling/rounds": float(max(rnd for _, rnd, _ in sampled) + 1),
                        "sampling/prompts_drawn": float(len(sampled)),
                        "sampling/kept_frac": informative / max(1, len(generated))}
            if (identical := identical_group_frac(generated)) is not None:   # as collect's
                metrics["sampling/identical_frac"] = identical
        staleness = [step - 1 - g.version for g in batch if g.version is not None] or [0]
        metrics |= {f"async/staleness_{j}": staleness.count(j) / len(staleness)
                    for j in range(self.buffer.max_staleness + 1)}
        metrics |= {
            "async/staleness_mean": sum(staleness) / len(staleness),
            "async/staleness_max": float(max(staleness)),
            "async/dropped_stale": float(self.buffer.dropped_stale - self.dropped_before),
            "async/buffer_fill": fill,
            "async/trainer_idle_frac": min(1.0, waited / wall),
            "async/partial_frac": sum(len({v for v, m in zip(t.policy_versions, t.loss_mask, strict=True) if m}) > 1
                                      for t in trajs) / max(1, len(trajs)),
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


def step_batches(cfg: Config, placement: Placement, sampler: Sampler, sampling: SamplingParams, *,
                 curriculum: Curriculum | None = None) -> SyncBatches | AsyncBatches:
    """The source of each step's groups that ``rollout.mode`` asks for (a curriculum: sync only)."""
    if cfg.rollout.mode == "async":
        return AsyncBatches(placement.stream(), placement.score, sampler, sampling, cfg.algorithm,
                            prompts_per_step=cfg.train.prompts_per_step, max_staleness=cfg.rollout.max_staleness,
                            seed=cfg.seeds.sampling, reward=cfg.reward)
    return SyncBatches(cfg, placement, sampler, sampling, curriculum)

"""What a run carries between steps and across a restart: outputs, counters, checkpoints."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from rlxf.config import Config, dump_config
from rlxf.data import Sampler
from rlxf.errors import UserInputError, close_all
from rlxf.metrics.progress import ProgressDisplay
from rlxf.metrics.sinks import JsonlWriter, MultiSink, build_sinks, read_jsonl, truncate_after_step
from rlxf.run_dir import RunDir
from rlxf.trainer.checkpoint import (
    CheckpointDamaged,
    intact_checkpoint,
    load_trainer_state,
    save_checkpoint,
    set_rng_state,
)
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Trajectory

if TYPE_CHECKING:
    from rlxf.placement.base import Placement  # the interface only: the trainer never builds one

log = logging.getLogger("rlxf")


class Stateful(Protocol):
    """What a checkpoint saves of the loop's data-side helpers (curriculum, demonstrations)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


STORED_OBSERVATION_CHARS = 10_000  # of an observation that ended its episode unappended (it can be megabytes)


def _stored_episode(episode: dict[str, Any]) -> dict[str, Any]:
    """``episode`` as samples.jsonl keeps it: the text of an observation the episode ended
    without appending (``final_observation``: one a token limit refused can be a tool's megabyte
    of output) is cut to ``STORED_OBSERVATION_CHARS``, saying how much was left out."""
    final = episode.get("final_observation") or []

    def cut(message: Any) -> Any:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str) or len(content) <= STORED_OBSERVATION_CHARS:
            return message
        left = len(content) - STORED_OBSERVATION_CHARS
        return {**message, "content": content[:STORED_OBSERVATION_CHARS] + f"... [{left} more characters not kept]"}

    return {**episode, "final_observation": [cut(m) for m in final]} if final else episode


class SampleWriter:
    """samples.jsonl: a seeded ``fraction`` of each step's rollouts, with rewards and scores."""

    def __init__(self, path: Path, fraction: float, seed: int):
        self.fraction = fraction
        self.seed = seed
        self._writer = JsonlWriter(path, fsync=False) if fraction > 0 else None

    def write(self, step: int, trajs: list[Trajectory]) -> None:
        if self._writer is None or not trajs:
            return
        k = max(1, round(self.fraction * len(trajs)))
        gen = torch.Generator().manual_seed(derive_seed(self.seed, step, 11))
        for i in sorted(torch.randperm(len(trajs), generator=gen)[:k].tolist()):
            t = trajs[i]
            self._writer.write({
                "step": step, "uid": t.prompt.uid, "group": t.group, "prompt": t.prompt.prompt_text,
                "response": t.response_text, "reward": t.reward, "scores": t.scores, "correct": t.correct,
                "finish_reason": t.finish_reason, "response_tokens": len(t.response_ids),
                "reward_error": t.reward_error,
                # turns, rewards, error, conversation
                **({"episode": _stored_episode(t.episode)} if t.episode is not None else {}),
            })

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def train_on_hint(field: str, schedule: str) -> str:
    """How to train a run that has ended further: raise ``field`` (its steps or time budget) on
    ``--resume``; a cosine schedule has annealed over the run, and a resume keeps its length."""
    if schedule == "cosine":
        return (f"to train on, start a new run from its model (model.path): its lr followed a cosine schedule "
                f"over the run, and --resume keeps {field}")
    return f"raise {field} to train on"


class TrainClock:
    """The run's training time across restarts, what ``train.max_seconds`` / ``sft.max_seconds``
    budget: the seconds the checkpoint resumed from had trained, plus this process's since
    ``start``. Restarting the clock on every ``--resume`` gave a resumed run a whole budget more."""

    def __init__(self, before: float = 0.0, checked: float = 0.0, budget: float | None = None):
        self.before = before    # trained before this process (the checkpoint's)
        self.checked = checked  # the reading the last step's time check saw
        self.budget = budget    # the run's time budget (train.max_seconds / sft.max_seconds), kept with it
        self._began = time.perf_counter()

    def start(self) -> None:
        self._began = time.perf_counter()

    def seconds(self) -> float:
        return self.before + time.perf_counter() - self._began

    def out_of(self, budget: float | None) -> bool:
        """Whether ``budget`` is spent; read once per step, after its training."""
        self.checked = self.seconds()
        return budget is not None and self.checked >= budget

    def spent(self, budget: float | None) -> bool:
        """Whether the step checked last (the checkpoint's, on resume) ended the run by ``budget``:
        then the run stopped there, as a finished one stops at its last step."""
        return budget is not None and self.checked >= budget

    def state_dict(self) -> dict[str, float | None]:
        return {"seconds": self.seconds(), "checked": self.checked, "budget": self.budget}

    @staticmethod
    def check_resumed(trainer_state: dict[str, Any], budget: float | None, schedule: str, field: str,
                      ckpt: Path) -> None:
        """A cosine lr schedule anneals over the time budget where it ends the run first: a
        resume that changes ``field`` (the budget) would move the lr back up the curve (a run
        that had annealed to its minimum would climb again), so it is not the run it resumes,
        as a changed step count is not (``_Trainable.load_state_dict``). A checkpoint that
        kept no budget (an older rlxf's) is not checked."""
        saved = trainer_state.get("clock", {})
        if schedule != "cosine" or "budget" not in saved or saved["budget"] == budget:
            return
        raise UserInputError(
            f"--resume: the learning rate follows a cosine schedule over the run's time budget too, "
            f"{field}={saved['budget']} in {ckpt} and {budget} with this config: the run's length changed. "
            f"Resume with {field}={saved['budget']}, or start a new run from the checkpoint's model "
            f"(model.path) to train longer (a schedule: constant run may change its budget on --resume)")

    @classmethod
    def restored(cls, trainer_state: dict[str, Any], ckpt: Path) -> TrainClock:
        """The clock saved in a checkpoint's trainer state; 0 for one saved before clocks were."""
        if "clock" not in trainer_state:
            log.info("%s has no training time (saved by an older rlxf): train.max_seconds and "
                     "sft.max_seconds count this run's time from 0 at this resume", ckpt)
            return cls()
        saved = trainer_state["clock"]
        return cls(float(saved["seconds"]), float(saved["checked"]), saved.get("budget"))


@dataclass
class RunState:
    """The run's outputs and counters; ``step`` is the last completed step."""

    run: RunDir
    cfg: Config
    sink: MultiSink
    samples: SampleWriter
    step: int = 0
    skipped: int = 0
    clock: TrainClock = field(default_factory=TrainClock)
    _progress: ProgressDisplay | None = field(default=None, repr=False)

    @classmethod
    def fresh(cls, run: RunDir, cfg: Config, step: int = 0) -> RunState:
        run.write_config(dump_config(cfg))
        sink = build_sinks(cfg.logging.sinks, run.path, project=cfg.logging.project, run_name=cfg.run.name,
                           config=cfg.model_dump(mode="json"))
        return cls(run, cfg, sink, SampleWriter(run.samples, cfg.logging.samples_fraction, cfg.seeds.sampling), step=step)

    def log(self, step: int, metrics: dict[str, float], trajs: list[Trajectory] | None = None) -> None:
        self.sink.log(step, metrics)
        if trajs:
            self.samples.write(step, trajs)
        self.step = max(self.step, step)

    def progress(self, total: int) -> ProgressDisplay:
        self._progress = ProgressDisplay(total, start=self.step, enabled=self.cfg.logging.progress,
                                         log_every=self.cfg.logging.log_every,
                                         max_seconds=self.cfg.train.max_seconds, spent=self.clock.before)
        return self._progress

    def close(self) -> None:
        close_all((self.sink.close, self.samples.close))


def recorded_metrics(run: RunDir, step: int) -> dict[str, float]:
    """The numbers of metrics.jsonl's last record of step ``step``: what a run a ``--resume`` finds
    already done at ``step`` (by its steps, time budget or stop rule) returns, as it did when it ended."""
    record = next((r for r in reversed(read_jsonl(run.metrics)) if r.get("step") == step), {})
    return {k: float(v) for k, v in record.items() if k != "step" and isinstance(v, int | float)}


def save(run: RunDir, placement: Placement, state: RunState, sampler: Sampler, step: int,
         extra: dict[str, Stateful] | None = None) -> Path:
    """Checkpoint everything a bit-exact resume needs: the placement's models and optimizer
    state, and the loop's own (data position, counters, RNG, and each of ``extra``'s states:
    the curriculum's records, the PPO-ptx demonstrations' position, async mode's prompts in flight),
    and the training time so far, which ``train.max_seconds`` budgets across resumes: read once the
    models are written, so that a resumed run's budget counts the time writing them took."""
    loop_state = {"sampler": sampler.state_dict(), "skipped": state.skipped,
                  **{name: obj.state_dict() for name, obj in (extra or {}).items()}}
    path = save_checkpoint(run.checkpoints, step, write=placement.save,
                           state=lambda: {**loop_state, "clock": state.clock.state_dict()},
                           keep_last=state.cfg.checkpoint.keep_last)
    log.info("saved checkpoint %s", path)
    return path


def restore(run: RunDir, cfg: Config, placement: Placement, sampler: Sampler,
            extra: dict[str, Stateful] | None = None) -> RunState:
    """Reload the newest intact checkpoint; outputs are cut back to its step."""
    ckpt = intact_checkpoint(run.checkpoints)
    if ckpt is None:  # killed before the first checkpoint: start over, keeping nothing half-done
        log.warning("no checkpoint in %s; starting from step 0", run.checkpoints)
        for path in (run.metrics, run.samples):  # the start's evaluation (step 0) runs again too
            truncate_after_step(path, -1)
        return RunState.fresh(run, cfg)
    trainer_state = load_trainer_state(ckpt)
    # refused before anything is loaded or written (RunState.fresh writes config.yaml)
    TrainClock.check_resumed(trainer_state, cfg.train.max_seconds, cfg.train.optim.schedule, "train.max_seconds", ckpt)
    step = int(trainer_state["step"])
    placement.load(ckpt)
    placement.sync_weights(step)
    sampler.load_state_dict(trainer_state["sampler"])
    for name, obj in (extra or {}).items():
        if name not in trainer_state:
            raise CheckpointDamaged(f"{ckpt} has no {name} state: it was saved by a run configured without it; "
                                    f"resume with the config it was saved with")
        obj.load_state_dict(trainer_state[name])
    set_rng_state(trainer_state["rng"])
    dropped = sum(truncate_after_step(p, step) for p in (run.metrics, run.samples))
    log.info("resumed from %s (step %d); dropped %d records written after it", ckpt, step, dropped)
    state = RunState.fresh(run, cfg, step=step)
    state.skipped = int(trainer_state["skipped"])
    state.clock = TrainClock.restored(trainer_state, ckpt)
    return state

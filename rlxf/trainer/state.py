"""What a run carries between steps and across a restart: outputs, counters, checkpoints."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlxf.config import Config, dump_config
from rlxf.metrics.progress import ProgressDisplay
from rlxf.metrics.sinks import JsonlWriter, MultiSink, build_sinks, truncate_after_step
from rlxf.models import load_model, save_model
from rlxf.placement.local import Roles
from rlxf.run_dir import RunDir
from rlxf.trainer.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint, set_rng_state
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Trajectory

log = logging.getLogger("rlxf")


def mini_batch_plan(num_samples: int, cfg: Config, step: int) -> list[list[int]]:
    """Row indices of each optimizer step: epochs x shuffled mini-batches (seeded by step)."""
    size = cfg.derived.mini_batch_size
    if size >= num_samples and cfg.train.ppo_epochs == 1:
        return [list(range(num_samples))]
    gen = torch.Generator().manual_seed(derive_seed(cfg.run.seed, step, 7))
    plan = []
    for _ in range(cfg.train.ppo_epochs):
        perm = torch.randperm(num_samples, generator=gen).tolist()
        plan += [perm[i:i + size] for i in range(0, num_samples, size)]
    return plan


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
            })

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


@dataclass
class RunState:
    """The run's outputs and counters; ``step`` is the last completed step."""

    run: RunDir
    cfg: Config
    sink: MultiSink
    samples: SampleWriter
    step: int = 0
    skipped: int = 0
    _progress: ProgressDisplay | None = field(default=None, repr=False)

    @classmethod
    def fresh(cls, run: RunDir, cfg: Config, step: int = 0) -> RunState:
        run.config.write_text(dump_config(cfg))
        sink = build_sinks(cfg.logging.sinks, run.path, project=cfg.logging.project, run_name=cfg.run.name,
                           config=cfg.model_dump(mode="json"))
        return cls(run, cfg, sink, SampleWriter(run.samples, cfg.logging.samples_fraction, cfg.run.seed), step=step)

    def log(self, step: int, metrics: dict[str, float], trajs: list[Trajectory] | None = None) -> None:
        self.sink.log(step, metrics)
        if trajs:
            self.samples.write(step, trajs)
        self.step = max(self.step, step)

    def progress(self, total: int) -> ProgressDisplay:
        self._progress = ProgressDisplay(total, start=self.step, enabled=self.cfg.logging.progress,
                                         log_every=self.cfg.logging.log_every)
        return self._progress

    def close(self) -> None:
        self.sink.close()
        self.samples.close()


def save(run: RunDir, roles: Roles, state: RunState, step: int) -> Path:
    """Checkpoint everything a bit-exact resume needs."""
    writers = {"model": lambda d: save_model(roles.actor.model, d, roles.tokenizer)}
    if roles.critic is not None:
        writers["critic"] = lambda d: roles.critic.model.save_pretrained(d, roles.tokenizer)
    trainer_state = {
        "actor": roles.actor.state_dict(),
        "critic": roles.critic.state_dict() if roles.critic is not None else None,
        "sampler": roles.sampler.state_dict(),
        "kl": roles.kl.state_dict(),
        "experience": roles.experience.state_dict(),
        "skipped": state.skipped,
        "trainable": roles.actor.adapter_state(),
    }
    path = save_checkpoint(run.checkpoints, step, writers=writers, state=trainer_state,
                           keep_last=state.cfg.checkpoint.keep_last)
    log.info("saved checkpoint %s", path)
    return path


def restore(run: RunDir, roles: Roles) -> RunState:
    """Reload the newest complete checkpoint into ``roles``; outputs are cut back to its step."""
    ckpt = latest_checkpoint(run.checkpoints)
    cfg = roles.cfg
    if ckpt is None:  # killed before the first checkpoint: start over, keeping nothing half-done
        log.warning("no checkpoint in %s; starting from step 0", run.checkpoints)
        for path in (run.metrics, run.samples):
            truncate_after_step(path, 0)
        return RunState.fresh(run, cfg)
    trainer_state = load_trainer_state(ckpt)
    step = int(trainer_state["step"])
    if trainer_state["trainable"]:
        roles.actor.load_adapter_state(trainer_state["trainable"])
    else:
        fresh = load_model(ckpt / "model", device=roles.actor.device, dtype=roles.actor.dtype)
        roles.actor.model.load_state_dict(fresh.state_dict())
        del fresh
    roles.actor.load_state_dict(trainer_state["actor"])
    if roles.critic is not None:
        from rlxf.models.value_model import ValueModel

        fresh = ValueModel.from_pretrained(ckpt / "critic", device=roles.actor.device, dtype=roles.actor.dtype)
        roles.critic.model.load_state_dict(fresh.state_dict())
        roles.critic.load_state_dict(trainer_state["critic"])
    roles.sampler.load_state_dict(trainer_state["sampler"])
    roles.kl.load_state_dict(trainer_state["kl"])
    roles.experience.load_state_dict(trainer_state["experience"])
    roles.engine.update_weights(roles.actor.model.named_parameters(), version=step)
    set_rng_state(trainer_state["rng"])
    dropped = sum(truncate_after_step(p, step) for p in (run.metrics, run.samples))
    log.info("resumed from %s (step %d); dropped %d records written after it", ckpt, step, dropped)
    state = RunState.fresh(run, cfg, step=step)
    state.skipped = int(trainer_state["skipped"])
    return state

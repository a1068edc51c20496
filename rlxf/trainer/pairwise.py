"""The training loop over preference pairs, shared by `rlxf rm` and `rlxf dpo`.

One optimizer step per batch of ``batch_size`` pairs drawn by a resumable sampler, the
micro-batches' losses through the shared ``TrainableModel`` step, held-out evaluation at the
start, every ``eval_every`` steps and at the end, checkpoints that resume bit for bit, in the
layout of every run: ``<run>/checkpoints/step_N/model`` (the final step's always). A SIGTERM or
a first Ctrl-C finishes the step, checkpoints it and raises ``TrainingInterrupted``, as in RL
(in the last step, the run ends as finished).
What is learned (a reward model's scores, a policy's log-ratios) is the ``PairObjective``'s
business.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from torch import Tensor

from rlxf.config import Config
from rlxf.config.preference import PairTrainConfig
from rlxf.data import PromptSampler
from rlxf.data.preference import PreferenceData, PreferenceExample
from rlxf.metrics.progress import ProgressDisplay
from rlxf.metrics.sinks import build_sinks
from rlxf.run_dir import RunDir
from rlxf.trainer.interrupt import StopRequest, TrainingInterrupted
from rlxf.trainer.roles import micro_batches
from rlxf.trainer.state import recorded_metrics
from rlxf.trainer.trainable import TrainableModel, checkpoint_trainable, resume_trainable

log = logging.getLogger("rlxf")


class PairObjective(Protocol):
    prefix: str   # metric namespace, e.g. "rm"

    def __call__(self, pairs: list[PreferenceExample]) -> tuple[Tensor, dict[str, Tensor]]:
        """(B,) per-pair losses with grad, and 0-dim metric means over the pairs."""
        ...

    def evaluate(self, pairs: list[PreferenceExample]) -> dict[str, float]:
        """Held-out metrics (no grad), already namespaced, e.g. ``eval/rm/accuracy``."""
        ...


@dataclass
class PairRun:
    """A pair-training run: the model core, what it learns, and its data. ``annotate(model_dir)``
    adds files next to every saved model (the reward model's score statistics)."""

    core: TrainableModel
    objective: PairObjective
    data: PreferenceData
    tokenizer: object
    annotate: Callable[[Path], None] | None = None


def _loss_shares(objective: PairObjective, batch: list[PreferenceExample], micro_batch_size: int,
                 metrics: dict[str, float]) -> Iterator[Tensor]:
    """Each micro-batch's summed loss over the batch size (its share of the batch mean); its
    metrics, weighted the same way, are added into ``metrics``."""
    for idx in micro_batches(len(batch), micro_batch_size):
        losses, m = objective([batch[i] for i in idx])
        share = len(idx) / len(batch)
        loss = losses.sum() / len(batch)
        for k, v in {"loss": loss.detach(), **{k: v * share for k, v in m.items()}}.items():
            metrics[k] = metrics.get(k, 0.0) + float(v)
        yield loss


def train_pairs(job: PairRun, cfg: Config, section: PairTrainConfig, run: RunDir, *,
                resume: bool) -> dict[str, float]:
    """Train for ``section.steps`` optimizer steps (continuing the run's last checkpoint with
    ``resume``); writes metrics and ``checkpoints/step_N/``, the last step's always. Returns the
    last metrics."""
    core, objective, prefix = job.core, job.objective, job.objective.prefix
    sampler = PromptSampler(job.data.train, seed=cfg.seeds.data, shuffle=cfg.data.shuffle)
    start = resume_trainable(run, core, sampler, steps=section.steps, field=f"{prefix}.steps") if resume else 0
    if start >= section.steps:   # done (resume_trainable said there is nothing to train): its last record
        return recorded_metrics(run, start)

    def checkpoint(step: int) -> Path:
        return checkpoint_trainable(run, step, core, job.tokenizer, sampler, keep_last=cfg.checkpoint.keep_last,
                                    annotate=job.annotate)

    def evaluate() -> dict[str, float]:
        return objective.evaluate(job.data.test) if job.data.test else {}

    sink = build_sinks(cfg.logging.sinks, run.path, project=cfg.logging.project, run_name=cfg.run.name,
                       config=cfg.model_dump(mode="json"))
    last: dict[str, float] = {}
    stop = StopRequest()
    try:
        with stop:  # from here a signal stops the run after the first evaluation or the step in progress
            if start == 0 and job.data.test:
                sink.log(0, evaluate())
                if stop.signum is not None:  # nothing trained yet, so nothing to save
                    raise TrainingInterrupted(stop.signum, 0, None)
            fields = (("loss", f"{prefix}/loss", ".4f"), ("acc", f"{prefix}/reward_accuracy", ".3f"),
                      ("eval acc", f"eval/{prefix}/reward_accuracy", ".3f"))
            with ProgressDisplay(section.steps, start, enabled=cfg.logging.progress,
                                 log_every=cfg.logging.log_every, fields=fields) as progress:
                for step in range(start + 1, section.steps + 1):
                    t0 = time.perf_counter()
                    batch = sampler.next_batch(section.batch_size)
                    shares: dict[str, float] = {}
                    metrics = core.train_step(_loss_shares(objective, batch, section.micro_batch_size, shares))
                    metrics |= {f"{prefix}/{k}": v for k, v in shares.items()}
                    metrics["time/train"] = time.perf_counter() - t0
                    if (section.eval_every and step % section.eval_every == 0) or step == section.steps:
                        metrics |= evaluate()
                    sink.log(step, metrics)
                    progress.update(step, metrics)
                    last = metrics
                    stopping = stop.signum  # read once: a signal may land while the checkpoint is written
                    if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or step == section.steps \
                            or stopping is not None:
                        saved = checkpoint(step)
                    if stopping is not None and step < section.steps:  # the last step ends the run as usual
                        raise TrainingInterrupted(stopping, step, saved)
            # the last step's checkpoint, which it always saves (the newest found now: none, if it went since)
            log.info("%s: %d steps; model in %s", prefix, section.steps, saved / "model")
    finally:
        sink.close()
    return last

"""The RL loop. It reads like the algorithm and does not know which algorithm it runs:

    for each step:
        rollout    the engine samples n responses per prompt; the reward scores them
                   (DAPO's dynamic sampling keeps sampling until enough groups disagree);
                   rollout.mode=async: the engine samples ahead while the trainer trains, and
                   the step takes the first groups ready within the staleness bound
        experience π_old, π_ref and V where needed; rewards on tokens; advantages (registry)
        train      policy (and critic) updates over epochs and mini-batches
        sync       the new weights go to the engine
        log        metrics.jsonl (+ sinks), samples.jsonl, progress
        eval / checkpoint, every N steps (and after the step a SIGTERM / Ctrl-C arrived in)

The loop holds the data and the schedule; everything that touches weights happens in the
placement it is handed (``rlxf.placement``: the models, engine, reward, and what the algorithm
decides: the advantage estimator, the objective, the reference, the critic). It talks to the
placement only through ``rlxf.placement.base.Placement``. Run with ``rlxf train CONFIG``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import torch

from rlxf.algorithms import registry
from rlxf.config import Config
from rlxf.config.explain import unused_settings
from rlxf.data import build_prompt_data, build_sampler
from rlxf.data.curriculum import Curriculum
from rlxf.data.demos import build_demonstrations
from rlxf.errors import close_during
from rlxf.metrics.sinks import read_jsonl
from rlxf.rollout import SamplingParams
from rlxf.run_dir import RunDir
from rlxf.trainer.collect import step_metrics
from rlxf.trainer.diagnostics import Diagnostics
from rlxf.trainer.evaluate import evaluate, no_held_out_hint
from rlxf.trainer.interrupt import StopRequest, TrainingInterrupted
from rlxf.trainer.state import RunState, recorded_metrics, restore, save, train_on_hint
from rlxf.trainer.stream import step_batches
from rlxf.trainer.timer import PhaseTimer

if TYPE_CHECKING:
    from rlxf.placement.base import Placement

log = logging.getLogger("rlxf")


class TrainingDiverged(RuntimeError):
    """Too many consecutive steps had a non-finite loss or gradient."""


def train(cfg: Config, run: RunDir, placement: Placement, *, resume: bool = False) -> dict[str, float]:
    """Run RL training with the roles in ``placement``; returns the last step's metrics."""
    for note in unused_settings(cfg):  # valid, but the run behaves as if they were unset
        log.warning("%s", note)
    seeds = cfg.seeds  # data, sampling and init draw from separate seeds (run.seed by default)
    torch.manual_seed(seeds.init)
    data = build_prompt_data(cfg.data, placement.tokenizer, seed=seeds.data)
    log.info("data: %d train / %d held-out prompts (%s)", len(data.train), len(data.test), data.report)
    evaluating = bool(data.test)  # with no held-out prompts nothing is measured: no eval/* metrics at all
    if not evaluating and (cfg.eval.every or cfg.eval.at_start):
        log.warning("eval.every / eval.at_start: evaluation is skipped: %s", no_held_out_hint(cfg.data))
    sampler = build_sampler(data.train, data.weights, seed=seeds.data, shuffle=cfg.data.shuffle)
    curriculum = (Curriculum(cfg.data.curriculum, seed=seeds.data, num_prompts=len(data.train))
                  if cfg.data.curriculum.enabled else None)
    demos = build_demonstrations(cfg, placement.tokenizer, held_out=data.held_out)  # PPO-ptx, or None
    sampling = SamplingParams.from_config(cfg.rollout)
    batches = step_batches(cfg, placement, sampler, sampling, curriculum=curriculum)  # sync or async
    # what a checkpoint keeps besides the models: the curriculum's records, the demonstrations'
    # position, the prompts drawn and not yet trained on (async: in flight or waiting)
    extra = {name: obj for name, obj in (("curriculum", curriculum), ("ptx", demos), ("in_flight", batches.in_flight))
             if obj is not None}
    state = restore(run, cfg, placement, sampler, extra) if resume else RunState.fresh(run, cfg)
    state.clock.budget = cfg.train.max_seconds  # kept in each checkpoint: a cosine schedule anneals over it
    if cfg.train.optim.schedule == "cosine":
        log.info("lr schedule: cosine down to %g x lr over %d optimizer steps%s",
                 cfg.train.optim.min_lr_ratio, cfg.derived.actor_optimizer_steps,
                 "" if cfg.train.max_seconds is None else
                 f", or over train.max_seconds={cfg.train.max_seconds:g} where that ends first")
    end = cfg.train.steps  # the last step to take; a resumed run that ended by its time budget takes none
    if state.step >= cfg.train.steps:
        log.warning("--resume: the run has done %d steps and train.steps is %d: nothing to train; %s",
                    state.step, cfg.train.steps, train_on_hint("train.steps", cfg.train.optim.schedule))
    elif state.clock.spent(cfg.train.max_seconds):
        end = state.step
        log.warning("--resume: the run has trained %.1f s and train.max_seconds is %g: nothing to train; %s",
                    state.clock.checked, cfg.train.max_seconds,
                    train_on_hint("train.max_seconds", cfg.train.optim.schedule))
    # the last step's metrics; a resumed run already done returns its last record, as it did when it ended
    last = recorded_metrics(run, state.step) if end <= state.step else {}
    # warnings when the run is not learning (once each)
    diagnostics = Diagnostics(group_baseline=registry.needs("advantage", cfg.algorithm.advantage).groups)
    if resume:  # as if never interrupted: the steps done count (restore cut metrics.jsonl back to them)
        diagnostics.replay(read_jsonl(run.metrics))
    checkpoint_seconds: dict[str, float] = {}
    stop = StopRequest()
    try:
        # from here a signal stops the run at the next boundary: after the first evaluation, or
        # after the step in progress (outside, SIGTERM would end the process with nothing said)
        with stop:
            if evaluating and state.step == 0 and cfg.eval.at_start:
                start = evaluate(placement, data.test, cfg.eval, sampling, seed=seeds.sampling, reward_cfg=cfg.reward)
                state.log(0, start)
                diagnostics.observe(0, start)  # the accuracy later evaluations are compared with
                if stop.signum is not None:  # nothing trained yet, so nothing to save
                    raise TrainingInterrupted(stop.signum, 0, None)
            state.clock.start()  # training time, counted on from the checkpoint's on resume
            with state.progress(cfg.train.steps) as progress:
                for step in range(state.step + 1, end + 1):
                    timer = PhaseTimer()
                    # the last step: train.steps, or the first to end past train.max_seconds (the
                    # clock, the run's training time so far, is read before the step's eval, which a
                    # last step always has)
                    final = step == cfg.train.steps

                    # rollout + reward: a group of n scored responses per prompt
                    trajs, rollout_metrics = batches.next(step, timer)

                    # experience: log-probs, values, token rewards, advantages
                    with timer("experience"):
                        exp, exp_metrics = placement.make_experience(trajs)

                    # train: one optimizer step per mini-batch, over the PPO epochs (+ PPO-ptx's
                    # supervised loss on a batch of demonstrations per optimizer step)
                    # (a run with a time budget also tells the lr schedule how much of it is spent)
                    with timer("train"):
                        budget = {} if cfg.train.max_seconds is None else {
                            "time_spent": state.clock.seconds() / cfg.train.max_seconds}
                        if demos is None:
                            train_metrics = placement.update(exp, step, **budget)
                        else:
                            demo_batches = demos.next_batches(cfg.derived.optimizer_steps_per_step)
                            train_metrics = placement.update(exp, step, demos=demo_batches, **budget)

                    # sync: the engine samples the next step from the new weights
                    with timer("sync"):
                        placement.sync_weights(step)

                    out_of_time = state.clock.out_of(cfg.train.max_seconds)
                    final = final or out_of_time

                    # eval: held-out accuracy every eval.every steps
                    if evaluating and cfg.eval.every and (step % cfg.eval.every == 0 or final):
                        with timer("eval"):
                            eval_metrics = evaluate(placement, data.test, cfg.eval, sampling, seed=seeds.sampling,
                                                    reward_cfg=cfg.reward)
                    else:
                        eval_metrics = {}

                    # log, then checkpoint: a kill in between replays this step on resume
                    last = {**rollout_metrics, **exp_metrics, **train_metrics, **eval_metrics,
                            **step_metrics(trajs, timer), **placement.stats(), **checkpoint_seconds, **timer.metrics()}
                    state.skipped = state.skipped + 1 if train_metrics.get("skipped", 0) else 0
                    state.log(step, last, trajs)
                    diagnostics.observe(step, last)
                    progress.update(step, last)
                    checkpoint_seconds = {}
                    stopping = stop.signum  # read once: a signal may land while the checkpoint is written
                    if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or (
                            final and cfg.checkpoint.save_final) or stopping is not None:
                        t0 = time.perf_counter()
                        saved = save(run, placement, state, sampler, step, extra)
                        checkpoint_seconds = {"time/checkpoint": time.perf_counter() - t0}  # shown with the next step
                    if stopping is not None and not final:  # the last step ends the run as it would have
                        raise TrainingInterrupted(stopping, step, saved)
                    if state.skipped >= cfg.train.max_skipped_steps:
                        raise TrainingDiverged(
                            f"step {step}: {state.skipped} consecutive steps had a non-finite loss or gradient "
                            f"(see metrics.jsonl `skipped`); lower train.optim.lr, set train.optim.max_grad_norm, "
                            f"or check the rewards for inf/nan. The last good checkpoint is in {run.checkpoints}."
                        )
                    if out_of_time:
                        log.info("step %d: train.max_seconds=%g reached; stopping", step, cfg.train.max_seconds)
                        break
    except BaseException as e:  # closing the outputs must not hide why the run stopped
        close_during(e, state.close, "closing the run's metrics and samples")
        raise
    state.close()
    return last


__all__ = ["TrainingDiverged", "TrainingInterrupted", "train"]

"""The RL loop. It reads like the algorithm and does not know which algorithm it runs:

    for each step:
        rollout    the engine samples n responses per prompt; the reward scores them
                   (DAPO's dynamic sampling keeps sampling until enough groups disagree)
        experience π_old, π_ref and V where needed; rewards on tokens; advantages (registry)
        train      policy (and critic) updates over epochs and mini-batches
        sync       the new weights go to the engine
        log        metrics.jsonl (+ sinks), samples.jsonl, progress
        eval / checkpoint, every N steps

Everything the algorithm decides lives in the roles built from the config
(``rlxf.placement.local.build``): the advantage estimator, the objective, the reference, the
critic. Run with ``rlxf train CONFIG``.
"""

from __future__ import annotations

import logging
import time

import torch

from rlxf.config import Config
from rlxf.placement.local import Roles, build
from rlxf.run_dir import RunDir
from rlxf.trainer.collect import collect, step_metrics
from rlxf.trainer.evaluate import evaluate
from rlxf.trainer.experience import drift_metrics
from rlxf.trainer.state import RunState, mini_batch_plan, restore, save
from rlxf.trainer.timer import PhaseTimer

log = logging.getLogger("rlxf")


class TrainingDiverged(RuntimeError):
    """Too many consecutive steps had a non-finite loss or gradient."""


def train(cfg: Config, run: RunDir, *, resume: bool = False) -> dict[str, float]:
    """Run RL training; returns the last step's metrics."""
    torch.manual_seed(cfg.run.seed)
    roles = build(cfg)
    try:
        return _train(cfg, run, roles, resume)
    finally:
        roles.close()


def _train(cfg: Config, run: RunDir, roles: Roles, resume: bool) -> dict[str, float]:
    state = restore(run, roles) if resume else RunState.fresh(run, cfg)
    last: dict[str, float] = {}
    checkpoint_seconds: dict[str, float] = {}
    try:
        if state.step == 0 and cfg.eval.at_start:
            state.log(0, evaluate(roles, cfg.eval, seed=cfg.run.seed))
        with state.progress(cfg.train.steps) as progress:
            for step in range(state.step + 1, cfg.train.steps + 1):
                timer = PhaseTimer()

                # rollout + reward: a group of n scored responses per prompt
                trajs, rollout_metrics = collect(roles, step, timer)

                # experience: log-probs, values, token rewards, advantages
                with timer("experience"):
                    exp, exp_metrics = roles.experience(trajs, roles.actor, roles.reference, roles.critic,
                                                        roles.kl.value)

                # train: one optimizer step per mini-batch, over the PPO epochs
                with timer("train"):
                    plan = mini_batch_plan(len(exp), cfg, step)
                    train_metrics, first_logprobs = roles.actor.update(exp, plan, roles.kl.value)
                    if roles.critic is not None:
                        train_metrics |= roles.critic.update(exp, plan)
                drift = drift_metrics(exp, exp.old_logprobs if exp.old_logprobs is not None else first_logprobs,
                                      roles.experience.kl_estimator)
                if "kl" in drift:
                    roles.kl.update(drift["kl"], len(exp))

                # sync: the engine samples the next step from the new weights
                with timer("sync"):
                    roles.engine.update_weights(roles.actor.model.named_parameters(), version=step)

                # eval: held-out accuracy every eval.every steps
                if cfg.eval.every and (step % cfg.eval.every == 0 or step == cfg.train.steps):
                    with timer("eval"):
                        eval_metrics = evaluate(roles, cfg.eval, seed=cfg.run.seed)
                else:
                    eval_metrics = {}

                # log, then checkpoint: a kill in between replays this step on resume
                last = {**rollout_metrics, **exp_metrics, **train_metrics, **drift, **eval_metrics,
                        "kl_coef": roles.kl.value, **step_metrics(trajs, timer), **checkpoint_seconds,
                        **timer.metrics()}
                state.skipped = state.skipped + 1 if train_metrics.get("skipped", 0) else 0
                state.log(step, last, trajs)
                progress.update(step, last)
                checkpoint_seconds = {}
                if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or (
                        step == cfg.train.steps and cfg.checkpoint.save_final):
                    t0 = time.perf_counter()
                    save(run, roles, state, step)
                    checkpoint_seconds = {"time/checkpoint": time.perf_counter() - t0}  # shown with the next step
                if state.skipped >= cfg.train.max_skipped_steps:
                    raise TrainingDiverged(
                        f"step {step}: {state.skipped} consecutive steps had a non-finite loss or gradient "
                        f"(see metrics.jsonl `skipped`); lower train.optim.lr, set train.optim.max_grad_norm, "
                        f"or check the rewards for inf/nan. The last good checkpoint is in {run.checkpoints}."
                    )
    finally:
        state.close()
    return last


__all__ = ["Roles", "TrainingDiverged", "train"]

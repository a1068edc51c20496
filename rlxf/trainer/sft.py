"""Supervised fine-tuning: maximise log π(response | prompt) on demonstrations.

The loss is the mean negative log-likelihood over response tokens (prompt tokens are context,
not targets), on packed micro-batches through the same chunked log-prob path the RL trainer
uses. ``rlxf sft CONFIG`` runs it from a config; the quickstart uses it to give a tiny model
its first skills and as the time-matched continued-SFT baseline RL is compared with.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from rlxf.config import Config
from rlxf.config.load import ConfigError
from rlxf.config.train import SFTConfig
from rlxf.data import SFTExample, build_prompt_data, build_sampler, build_sft_data
from rlxf.metrics.progress import ProgressDisplay
from rlxf.metrics.sinks import build_sinks
from rlxf.models import load_from_config, sequence_logprobs
from rlxf.run_dir import RunDir
from rlxf.trainer.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint
from rlxf.trainer.interrupt import StopRequest, TrainingInterrupted
from rlxf.trainer.roles import nll_shares
from rlxf.trainer.state import TrainClock, recorded_metrics, train_on_hint
from rlxf.trainer.trainable import TrainableModel, resume_trainable

log = logging.getLogger("rlxf")


def sft_steps(model, batches: Callable[[], Sequence[SFTExample]], cfg: SFTConfig,
              on_step: Callable[[int, dict[str, float], bool], bool | None] | None = None, *,
              core: TrainableModel | None = None, start: int = 0, clock: TrainClock | None = None) -> int:
    """Train ``model`` up to step ``cfg.steps``, or until ``cfg.max_seconds`` pass.

    ``core``: the model's optimizer core (a new one by default); a resumed run passes the one
    it restored from a checkpoint with ``start``, the step that checkpoint was taken at, and
    ``clock``, the training time that checkpoint recorded (``cfg.max_seconds`` budgets the whole run).

    ``batches()`` gives the next batch of ``cfg.batch_size`` examples. ``on_step(step, metrics,
    last)`` (1-based step) sees sft/loss (mean NLL per response token), lr, grad_norm, skipped (1
    when a non-finite loss or gradient skipped the step) and tokens/s, and whether the step is the
    run's last (``cfg.steps`` reached or ``cfg.max_seconds`` spent); it returns True to stop there
    (``sft.stop_when``). Returns the last step taken.
    """
    core = core if core is not None else TrainableModel(model, cfg.optim, cfg.steps, cfg.micro_batch_size)
    clock = clock if clock is not None else TrainClock()
    clock.start()
    step = start
    while step < cfg.steps:
        t0 = time.perf_counter()
        batch = list(batches())
        tokens = sum(len(e.response_ids) for e in batch)
        nlls: list[float] = []
        if cfg.max_seconds is not None:  # a cosine schedule follows the time budget where it ends first
            core.follow_time_budget(clock.seconds() / cfg.max_seconds)
        forward = partial(core.run, sequence_logprobs)
        step_metrics = core.train_step(nll_shares(forward, batch, cfg.micro_batch_size, tokens, nlls))
        step += 1
        last = clock.out_of(cfg.max_seconds) or step >= cfg.steps
        if on_step is not None:
            dt = time.perf_counter() - t0
            if on_step(step, {"sft/loss": sum(nlls), **step_metrics,
                              "throughput/tokens_per_s": tokens / dt if dt > 0 else 0.0, "time/train": dt}, last):
                break
        if last:
            break
    model.eval()
    return step


def _stopped_at(cfg: Config, run: RunDir, step: int) -> dict[str, float] | None:
    """The metrics of step ``step`` if the run stopped there by ``sft.stop_when`` (its scheduled
    evaluation reached the level), else None."""
    target = cfg.sft.stop_when
    if target is None or not step or not cfg.sft.eval_every or step % cfg.sft.eval_every or step >= cfg.sft.steps:
        return None
    record = recorded_metrics(run, step)
    value = record.get(target.metric)
    if value is None or not value >= target.at_least:   # NaN is written as a string, so not a number here
        return None
    return record


def run_sft(cfg: Config, run: RunDir, *, resume: bool = False) -> dict[str, float]:
    """``rlxf sft``: fine-tune ``model.path`` on ``data``; writes ``<run>/checkpoints/step_N/model``
    (HF format, the layout RL runs use, so the run directory itself is a valid ``model.path``)
    every ``checkpoint.every`` steps and at the end; ``resume`` continues from the run's last one.
    A SIGTERM or a first Ctrl-C finishes the step, checkpoints it and raises ``TrainingInterrupted``."""
    from rlxf.config import dump_config
    from rlxf.rewards import build_run_reward
    from rlxf.rollout import SamplingParams, build_engine_from_config
    from rlxf.trainer.evaluate import evaluate_prompts, held_out_prompts, no_held_out_hint

    run.write_config(dump_config(cfg))
    model, tokenizer = load_from_config(cfg.model)
    data = build_sft_data(cfg.data, tokenizer, seed=cfg.seeds.data)
    sampler = build_sampler(data.train, data.weights, seed=cfg.seeds.data, shuffle=cfg.data.shuffle)
    core = TrainableModel(model, cfg.sft.optim, cfg.sft.steps, cfg.sft.micro_batch_size)
    start = resume_trainable(run, core, sampler, steps=cfg.sft.steps, field="sft.steps") if resume else 0
    if start >= cfg.sft.steps:   # done (resume_trainable said there is nothing to train): its last record
        return recorded_metrics(run, start)
    # the training time so far, which sft.max_seconds budgets (restarted, a resume got a whole budget more)
    resumed_from = run.checkpoints / f"step_{start}"
    clock = TrainClock()
    if start:
        trainer_state = load_trainer_state(resumed_from)
        TrainClock.check_resumed(trainer_state, cfg.sft.max_seconds, cfg.sft.optim.schedule, "sft.max_seconds",
                                 resumed_from)
        clock = TrainClock.restored(trainer_state, resumed_from)
    clock.budget = cfg.sft.max_seconds
    stopped = _stopped_at(cfg, run, start) if resume else None
    if stopped is not None:   # the run ended there by sft.stop_when: resuming it trains no further
        log.info("--resume: the run stopped at step %d, where %s reached sft.stop_when; nothing to train "
                 "(start a new run from its model to train on)", start, cfg.sft.stop_when.metric)
        return stopped
    if clock.spent(cfg.sft.max_seconds):   # it ended there by its time budget
        log.warning("--resume: the run has trained %.1f s and sft.max_seconds is %g: nothing to train; %s",
                    clock.checked, cfg.sft.max_seconds, train_on_hint("sft.max_seconds", cfg.sft.optim.schedule))
        return recorded_metrics(run, start)
    # held-out evaluation with the reward, as for RL: the same prompts and verifiers
    prompts = held_out_prompts(build_prompt_data(cfg.data, tokenizer, seed=cfg.seeds.data).test, cfg.eval.num_problems)
    if not prompts:   # nothing to measure: say so now, not with a missing metric at the first evaluation
        if cfg.sft.stop_when is not None:
            raise ConfigError(f"sft.stop_when reads a held-out evaluation, but {no_held_out_hint(cfg.data)}")
        if cfg.sft.eval_every:
            log.warning("sft.eval_every: evaluation is skipped: %s", no_held_out_hint(cfg.data))
    sink = build_sinks(cfg.logging.sinks, run.path, project=cfg.logging.project, run_name=cfg.run.name,
                       config=cfg.model_dump(mode="json"))
    reward = build_run_reward(cfg) if prompts else None
    engine = build_engine_from_config(cfg.rollout, model, tokenizer, seed=cfg.seeds.sampling) if prompts else None
    sampling = SamplingParams.from_config(cfg.rollout)

    def evaluate() -> dict[str, float]:
        if engine is None:
            return {}
        engine.update_weights(model.named_parameters(), version=0)
        return evaluate_prompts(engine, tokenizer, reward, prompts, sampling, pass_k=cfg.eval.pass_k, reward_cfg=cfg.reward,
                                seed=cfg.seeds.sampling)

    def checkpoint(step: int) -> Path:
        # checkpoint_trainable's layout, with the clock in the trainer state (read once the model is
        # written, so that sft.max_seconds counts the write after a resume)
        sampler_state = sampler.state_dict()
        return save_checkpoint(run.checkpoints, step, write=lambda directory: core.save(directory, tokenizer),
                               state=lambda: {"sampler": sampler_state, "clock": clock.state_dict()},
                               keep_last=cfg.checkpoint.keep_last)

    def reached(step: int, metrics: dict[str, float]) -> bool:
        """Whether ``sft.stop_when`` holds at this evaluation."""
        target = cfg.sft.stop_when
        if target is None:
            return False
        if target.metric not in metrics:
            evaluated = sorted(k for k in metrics if k.startswith("eval/"))
            raise ConfigError(f"sft.stop_when.metric: {target.metric!r} is not a metric of the evaluation; it logs "
                              f"{', '.join(evaluated) or 'none (no held-out prompts)'}")
        if metrics[target.metric] < target.at_least:
            return False
        log.info("SFT: %s = %.3f at step %d reaches sft.stop_when (%g); stopping", target.metric,
                 metrics[target.metric], step, target.at_least)
        return True

    last: dict[str, float] = {}
    evaluated_at = -1  # the step of the last evaluation in the loop
    stop = StopRequest()
    try:
        with stop, ProgressDisplay(cfg.sft.steps, start, enabled=cfg.logging.progress,
                                   log_every=cfg.logging.log_every, max_seconds=cfg.sft.max_seconds, spent=clock.before,
                                   fields=ProgressDisplay.SFT_FIELDS) as progress:
            def on_step(step: int, metrics: dict[str, float], final_step: bool) -> bool:
                nonlocal last, evaluated_at
                done = False
                # the last step is evaluated too, in its own record (metrics.jsonl: one per step);
                # the stop rule is read at the scheduled evaluations only (a run that ends anyway
                # must not fail on it after its last step, unsaved)
                scheduled = bool(cfg.sft.eval_every) and step % cfg.sft.eval_every == 0
                if scheduled or final_step:
                    metrics = {**metrics, **evaluate()}
                    evaluated_at = step
                    done = reached(step, metrics) if scheduled else False
                last = metrics
                sink.log(step, metrics)
                progress.update(step, metrics)
                stopping = stop.signum  # read once: a signal may land while the checkpoint is written
                every, final = cfg.checkpoint.every, step == cfg.sft.steps and cfg.checkpoint.save_final
                if (every and step % every == 0) or final or stopping is not None:
                    saved = checkpoint(step)
                if stopping is not None and not final_step:   # the last step finishes as it would have
                    raise TrainingInterrupted(stopping, step, saved)
                return done

            steps = sft_steps(model, lambda: sampler.next_batch(cfg.sft.batch_size), cfg.sft, on_step,
                              core=core, start=start, clock=clock)
            # still under `stop`: a signal from here on lets the last evaluation and checkpoint finish;
            # the loop evaluated its last step, unless there was none to take (a finished run resumed)
            final = evaluate() if evaluated_at != steps and steps > start else {}
            if final:
                sink.log(steps, {**last, **final})
                last = {**last, **final}
            # the one layout of every run (rlxf.models.paths): checkpoints/step_N/model, also when
            # sft.max_seconds stopped it early or checkpoint.every is 0
            final_dir = run.checkpoints / f"step_{steps}"
            if latest_checkpoint(run.checkpoints) != final_dir:
                checkpoint(steps)
        log.info("SFT: %d steps; model saved to %s", steps, final_dir / "model")
    finally:
        sink.close()
        if reward is not None:
            reward.close()
    return last

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

import torch

from rlxf.algorithms import masked_sum
from rlxf.config import Config
from rlxf.config.train import SFTConfig
from rlxf.data import PromptSampler, SFTExample, build_prompt_data, build_sft_data
from rlxf.metrics.progress import ProgressDisplay
from rlxf.metrics.sinks import build_sinks
from rlxf.models import load_from_config, save_model
from rlxf.models.logprobs import sequence_logprobs
from rlxf.run_dir import RunDir
from rlxf.trainer.checkpoint import save_checkpoint
from rlxf.trainer.optim import build_optimizer
from rlxf.trainer.roles import micro_batches

log = logging.getLogger("rlxf")


def sft_steps(model, batches: Callable[[], Sequence[SFTExample]], cfg: SFTConfig,
              on_step: Callable[[int, dict[str, float]], None] | None = None) -> int:
    """Train ``model`` for ``cfg.steps`` optimizer steps, or until ``cfg.max_seconds`` pass.

    ``batches()`` gives the next batch of ``cfg.batch_size`` examples. ``on_step(step, metrics)``
    (1-based step) sees sft/loss (mean NLL per response token), lr, grad_norm and tokens/s.
    Returns the number of steps taken.
    """
    optimizer, scheduler = build_optimizer(model.parameters(), cfg.optim, cfg.steps)
    max_norm = cfg.optim.max_grad_norm if cfg.optim.max_grad_norm is not None else float("inf")
    start = time.perf_counter()
    model.train()
    step = 0
    while step < cfg.steps:
        t0 = time.perf_counter()
        batch = list(batches())
        tokens = sum(len(e.response_ids) for e in batch)
        loss_sum = 0.0
        for idx in micro_batches(len(batch), cfg.micro_batch_size):
            mb = [batch[i] for i in idx]
            out = sequence_logprobs(model, [e.prompt_ids for e in mb], [e.response_ids for e in mb])
            nll = -masked_sum(out.logprobs, out.mask) / tokens  # a share of the batch's token mean
            nll.backward()
            loss_sum += float(nll.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if on_step is not None:
            dt = time.perf_counter() - t0
            on_step(step, {"sft/loss": loss_sum, "lr": scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                           "throughput/tokens_per_s": tokens / dt if dt > 0 else 0.0, "time/train": dt})
        if cfg.max_seconds is not None and time.perf_counter() - start >= cfg.max_seconds:
            break
    model.eval()
    return step


def run_sft(cfg: Config, run: RunDir) -> dict[str, float]:
    """``rlxf sft``: fine-tune ``model.path`` on ``data``; writes ``<run>/checkpoints/step_N/model``
    (HF format), the layout RL runs use, so the run directory itself is a valid ``model.path``."""
    from rlxf.config import dump_config
    from rlxf.rewards import build_reward
    from rlxf.rollout import SamplingParams, build_engine_from_config
    from rlxf.trainer.evaluate import evaluate_prompts

    run.config.write_text(dump_config(cfg))
    model, tokenizer = load_from_config(cfg.model)
    data = build_sft_data(cfg.data, tokenizer, seed=cfg.seeds.data)
    sampler = PromptSampler(data.train, seed=cfg.seeds.data, shuffle=cfg.data.shuffle)
    sink = build_sinks(cfg.logging.sinks, run.path, project=cfg.logging.project, run_name=cfg.run.name,
                       config=cfg.model_dump(mode="json"))
    # held-out evaluation with the reward, as for RL: the same prompts and verifiers
    prompts = build_prompt_data(cfg.data, tokenizer, seed=cfg.seeds.data).test[: cfg.eval.num_problems]
    reward = build_reward(cfg.reward) if prompts else None
    engine = build_engine_from_config(cfg.rollout, model, tokenizer, seed=cfg.seeds.sampling) if prompts else None
    sampling = SamplingParams.from_config(cfg.rollout)

    def evaluate() -> dict[str, float]:
        if engine is None:
            return {}
        engine.update_weights(model.named_parameters(), version=0)
        return evaluate_prompts(engine, tokenizer, reward, prompts, sampling, pass_k=cfg.eval.pass_k,
                                seed=cfg.seeds.sampling)

    last: dict[str, float] = {}
    try:
        with ProgressDisplay(cfg.sft.steps, enabled=cfg.logging.progress, log_every=cfg.logging.log_every,
                             max_seconds=cfg.sft.max_seconds,
                             fields=ProgressDisplay.SFT_FIELDS) as progress:
            def on_step(step: int, metrics: dict[str, float]) -> None:
                nonlocal last
                if cfg.sft.eval_every and step % cfg.sft.eval_every == 0:
                    metrics = {**metrics, **evaluate()}
                last = metrics
                sink.log(step, metrics)
                progress.update(step, metrics)

            steps = sft_steps(model, lambda: sampler.next_batch(cfg.sft.batch_size), cfg.sft, on_step)
        final = evaluate()
        if final:
            sink.log(steps, {**last, **final})
            last = {**last, **final}
        # the one layout of every run (rlxf.models.paths): checkpoints/step_N/model
        saved = save_checkpoint(run.checkpoints, steps, write=lambda d: save_model(model, d / "model", tokenizer),
                                state={"recipe": "sft"}, keep_last=1)
        log.info("SFT: %d steps; model saved to %s", steps, saved / "model")
    finally:
        sink.close()
        if reward is not None:
            reward.close()
    return last

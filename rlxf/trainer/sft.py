"""Supervised fine-tuning: maximise log π(response | prompt) on demonstrations.

The loss is the mean negative log-likelihood over response tokens (prompt tokens are context,
not targets), computed on packed micro-batches with the same chunked log-prob path the RL
trainer uses. Used by the quickstart to give a tiny model its first skills, and as the
continued-SFT baseline that RL is compared with.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rlxf.algorithms import masked_sum
from rlxf.config.train import OptimConfig
from rlxf.models.logprobs import sequence_logprobs
from rlxf.trainer.optim import build_optimizer
from rlxf.trainer.roles import micro_batches

log = logging.getLogger("rlxf")


@dataclass(frozen=True)
class SFTExample:
    prompt_ids: list[int]     # context, not trained on
    response_ids: list[int]   # targets (end-of-turn token included)


@dataclass
class SFTResult:
    steps: int
    seconds: float
    losses: list[float]       # mean NLL per optimizer step


def sft(model, examples: Callable[[int], Sequence[SFTExample]], *, steps: int, batch_size: int,
        micro_batch_size: int, optim: OptimConfig, max_seconds: float | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None) -> SFTResult:
    """Train ``model`` for ``steps`` optimizer steps (or until ``max_seconds`` pass).

    ``examples(step)`` returns the batch of optimizer step ``step`` (0-based), so the caller
    controls the data order (and a resumed or time-limited run stays reproducible).
    ``on_step(step, metrics)`` is called after each step with loss, lr, grad_norm, tokens/s.
    """
    optimizer, scheduler = build_optimizer(model.parameters(), optim, steps)
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    step = 0
    for step in range(steps):
        t0 = time.perf_counter()
        batch = list(examples(step))[:batch_size]
        total_tokens = sum(len(e.response_ids) for e in batch)
        loss_sum = 0.0
        for idx in micro_batches(len(batch), micro_batch_size):
            mb = [batch[i] for i in idx]
            out = sequence_logprobs(model, [e.prompt_ids for e in mb], [e.response_ids for e in mb])
            nll = -masked_sum(out.logprobs, out.mask) / total_tokens
            nll.backward()
            loss_sum += float(nll)
        max_norm = optim.max_grad_norm if optim.max_grad_norm is not None else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss_sum)
        if on_step is not None:
            dt = time.perf_counter() - t0
            on_step(step, {"sft/loss": loss_sum, "lr": scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                           "throughput/tokens_per_s": total_tokens / dt if dt > 0 else 0.0})
        if max_seconds is not None and time.perf_counter() - start >= max_seconds:
            step += 1
            break
    else:
        step = steps
    model.eval()
    return SFTResult(steps=step, seconds=time.perf_counter() - start, losses=losses)

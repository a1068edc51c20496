"""AdamW with linear warmup and a constant or cosine schedule."""

from __future__ import annotations

import math

import torch

from rlxf.config.train import OptimConfig


def lr_lambda(step: int, *, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """Multiplier of the peak lr at optimizer step ``step`` (0-based).

    Warmup: (step + 1) / warmup for the first ``warmup`` steps. Cosine: from 1 down to
    ``min_ratio`` over the remaining ``total - warmup`` steps.
    """
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def any_nonzero_grad(params) -> bool:
    """Whether any of ``params`` has a gradient with a non-zero entry (nan and inf count).

    An exact test, not a norm: squared tiny gradients can underflow a norm to 0. A sharded
    (FSDP) gradient is tested on this rank's shard; the ranks then agree (``DataParallel.agree``).
    """
    grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in params if p.grad is not None]
    return bool(grads) and bool(torch.stack([g.ne(0).any() for g in grads]).any())


def build_optimizer(params, cfg: OptimConfig, total_steps: int):
    """AdamW over the trainable ``params`` and its LambdaLR scheduler."""
    params = [p for p in params if p.requires_grad]
    # torch's fused AdamW kernel (CUDA and CPU): one pass per tensor instead of a dozen
    # elementwise ops; on CPU 5x faster than the default loop (tiny preset: 6.9 -> 1.3 ms a step)
    devices = {p.device.type for p in params}
    fused = bool(params) and len(devices) == 1 and devices <= {"cuda", "cpu"} \
        and all(p.is_floating_point() for p in params)
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
                            weight_decay=cfg.weight_decay, fused=fused or None)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_lambda(s, warmup=cfg.warmup_steps, total=total_steps,
                                 schedule=cfg.schedule, min_ratio=cfg.min_lr_ratio))
    return opt, sched

"""AdamW with linear warmup and a constant or cosine schedule."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch

from rlxf.config.train import OptimConfig

log = logging.getLogger("rlxf")


def lr_lambda(step: int, *, warmup: int, total: int, schedule: str, min_ratio: float,
              time_spent: float = 0.0) -> float:
    """Multiplier of the peak lr at optimizer step ``step`` (0-based).

    Warmup: (step + 1) / warmup for the first ``warmup`` steps. Cosine: from 1 down to
    ``min_ratio`` over the remaining ``total - warmup`` steps, or over a time budget where that
    ends first: ``time_spent`` is the fraction of it spent (``train.max_seconds``; 0 without one),
    and the schedule is as far along as the further of the two.
    """
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, max((step - warmup) / max(1, total - warmup), time_spent))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def any_nonzero_grad(params) -> bool:
    """Whether any of ``params`` has a gradient with a non-zero entry (nan and inf count).

    An exact test, not a norm: squared tiny gradients can underflow a norm to 0. A sharded
    (FSDP) gradient is tested on this rank's shard; the ranks then agree (``DataParallel.agree``).
    """
    grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in params if p.grad is not None]
    return bool(grads) and bool(torch.stack([g.ne(0).any() for g in grads]).any())


def auto_lr(hidden_size: int, num_layers: int) -> float:
    """``train.optim.lr: auto``: 0.1 / (hidden_size x num_layers).

    Adam moves every weight by about lr a step, whatever the gradient's scale. Such an update
    is coherent across a layer's fan-in, so it changes the layer's output about in proportion
    to its width, and the changes compound over the depth: for the same change of the
    network's function per step, lr must shrink as width x depth grows (the argument behind
    muP's 1/width Adam lr for hidden layers, with depth added). The constant is set where RL
    recipes for pretrained models agree: 1e-6 for a 7B model (Qwen2.5-7B: 3584 x 28)."""
    return 0.1 / (hidden_size * num_layers)


def resolve_lr(lr: float | str, model_config) -> float:
    """A configured lr as a number: ``auto`` from the model's (Hugging Face) config."""
    if lr != "auto":
        return float(lr)
    hidden = getattr(model_config, "hidden_size", None)
    layers = getattr(model_config, "num_hidden_layers", None)
    if not (isinstance(hidden, int) and isinstance(layers, int)):
        raise ValueError(f"train.optim.lr: auto needs the model config's hidden_size and num_hidden_layers; "
                         f"{type(model_config).__name__} has {hidden!r} and {layers!r}. Set train.optim.lr "
                         f"to a number (1e-6 suits a 7B model, 5e-6 a 0.5B one).")
    lr = auto_lr(hidden, layers)
    log.info("train.optim.lr: auto = %.2g (0.1 / (hidden %d x %d layers))", lr, hidden, layers)
    return lr


def build_optimizer(params, cfg: OptimConfig, total_steps: int, model_config=None,
                    time_spent: Callable[[], float] = lambda: 0.0):
    """AdamW over the trainable ``params`` and its LambdaLR scheduler (``model_config``: for
    ``lr: auto``; ``time_spent``: the fraction of the run's time budget spent, read by the
    schedule each time it sets the lr)."""
    params = [p for p in params if p.requires_grad]
    # torch's fused AdamW kernel (CUDA and CPU): one pass per tensor instead of a dozen
    # elementwise ops; on CPU 5x faster than the default loop (tiny preset: 6.9 -> 1.3 ms a step)
    devices = {p.device.type for p in params}
    fused = bool(params) and len(devices) == 1 and devices <= {"cuda", "cpu"} \
        and all(p.is_floating_point() for p in params)
    opt = torch.optim.AdamW(params, lr=resolve_lr(cfg.lr, model_config), betas=tuple(cfg.betas), eps=cfg.eps,
                            weight_decay=cfg.weight_decay, fused=fused or None)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_lambda(s, warmup=cfg.warmup_steps, total=total_steps,
                                 schedule=cfg.schedule, min_ratio=cfg.min_lr_ratio, time_spent=time_spent()))
    return opt, sched

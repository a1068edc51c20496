"""Data parallelism for the learner: N processes, one gradient.

Every rank holds the whole model and the whole step's Experience, runs its share of each
mini-batch's rows, and the gradients are summed over ranks before the optimizer step. Each
rank's loss is already normalised by the *whole* mini-batch's token / sequence counts (the
objective's ``Totals``), so the sum is the gradient one process computes over the whole
mini-batch: N ranks take the same optimizer step as one process, to float rounding (the order
of the additions differs). Then every rank holds the same weights, and rank 0 speaks for them
(checkpoint, weights for the engines).

This is what DDP does (an all-reduce of the gradients after backward), written for rlxf's
micro-batching: the gradient-accumulation loop, the loss normalisation and the skip decisions
(a non-finite loss on any rank, a gradient that is zero everywhere) must be global, and the
per-mini-batch metrics are sums of per-rank shares. gloo on CPU, NCCL on GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass(frozen=True)
class DataParallel:
    """This process's place in a data-parallel learner group (``world`` 1: no communication)."""

    rank: int = 0
    world: int = 1

    @property
    def active(self) -> bool:
        return self.world > 1

    def shard(self, rows: list[int]) -> list[int]:
        """This rank's contiguous share of ``rows`` (sizes differ by at most one)."""
        lo, hi = len(rows) * self.rank // self.world, len(rows) * (self.rank + 1) // self.world
        return rows[lo:hi]

    def sum_grads(self, params: list[torch.nn.Parameter], finite: bool) -> bool:
        """Sum the gradients of ``params`` over ranks (in place, one flat buffer); a parameter
        this rank never reached counts as zero. Returns whether every rank's loss was finite."""
        if not self.active:
            return finite
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads] + [torch.tensor([0.0 if finite else 1.0],
                                                                         device=grads[0].device, dtype=grads[0].dtype)])
        dist.all_reduce(flat)
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset:offset + n].view_as(g).clone()
            offset += n
        return bool(flat[-1] == 0)

    def sum_metrics(self, metrics: dict[str, Tensor]) -> dict[str, Tensor]:
        """Per-rank metric shares of one mini-batch -> the mini-batch's (``*_max`` / ``*_min``
        keys by max / min, the rest summed). Every rank must pass the same keys."""
        if not self.active or not metrics:
            return metrics
        keys = sorted(metrics)
        out = {}
        for op, pick in ((dist.ReduceOp.MAX, lambda k: k.endswith("_max")),
                         (dist.ReduceOp.MIN, lambda k: k.endswith("_min")),
                         (dist.ReduceOp.SUM, lambda k: not k.endswith(("_max", "_min")))):
            chosen = [k for k in keys if pick(k)]
            if not chosen:
                continue
            flat = torch.stack([metrics[k].detach().float().reshape(()) for k in chosen])
            dist.all_reduce(flat, op=op)
            out |= dict(zip(chosen, flat))
        return out

    def sum_tensor(self, x: Tensor) -> Tensor:
        if self.active:
            dist.all_reduce(x)
        return x


def init_process_group(rank: int, world: int, address: str, port: int, device: torch.device) -> DataParallel:
    """Join the learner group: gloo on CPU, NCCL on CUDA."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=rank, world_size=world)
    return DataParallel(rank, world)

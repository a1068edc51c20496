"""Data parallelism for the learner: N processes, one torch.distributed group, one global batch.

Every rank holds the whole step's ``Experience`` (it is small next to a model) and draws the
same mini-batch plan; each rank takes its contiguous share of every mini-batch's rows and of
every batch it computes log-probs or values for.

Why the gradients are *summed*, not averaged: a micro-batch's loss is already normalised by
the totals of the whole mini-batch (valid tokens, sequences, batch fraction; see
``rlxf.algorithms.aggregation``), which every rank computes from its full copy of the batch.
So one process accumulating its micro-batches computes Σ_micro ∇loss_micro, and N processes
compute the same sum split N ways: the global gradient is the sum over ranks. (Averaging, as
DDP does, would be right only if each rank normalised by its own share, which is a different
loss whenever ranks hold different numbers of tokens.) Everything decided from the gradient
is then decided on the global one: the clipping norm, skip-on-non-finite, skip-on-zero.

    ddp   every rank keeps a full replica; after a mini-batch's backward passes the gradients
          are summed by all-reduce, in flat buckets; each rank then steps its own identical
          optimizer
    fsdp  FSDP2 (``torch.distributed.fsdp.fully_shard`` per decoder layer, and a root unit
          with the embeddings, final norm and head): parameters, gradients and optimizer
          moments are sharded; backward reduce-scatters the gradient sum (divide factor 1);
          every forward all-gathers, so all ranks run the same number of forward/backward
          passes (a rank with fewer rows runs an idle pass that backpropagates zero)

``SINGLE`` is the one-process case: every method returns at once and nothing is communicated,
so the local placement runs the same code with no process group.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Literal

import torch
from torch import Tensor

Strategy = Literal["ddp", "fsdp"]

# elements per all-reduce bucket: big enough to amortise a call, small enough not to double
# a large model's gradient memory at once
_BUCKET = 1 << 24


@dataclass(frozen=True)
class DataParallel:
    """This process's place among the learner ranks, and the collectives the roles need."""

    rank: int = 0
    world: int = 1
    strategy: Strategy = "ddp"

    @property
    def lockstep(self) -> bool:
        """Whether every forward is a collective (FSDP), so ranks must run equal pass counts."""
        return self.world > 1 and self.strategy == "fsdp"

    def share(self, n: int) -> range:
        """This rank's contiguous share of ``n`` rows (sizes differ by at most one)."""
        return range(n * self.rank // self.world, n * (self.rank + 1) // self.world)

    def passes(self, n: int, micro_batch_size: int) -> int:
        """Micro-batches the largest share of ``n`` rows takes: what every rank runs under FSDP."""
        return math.ceil(math.ceil(n / self.world) / micro_batch_size)

    # -- collectives (no-ops for one process) --------------------------------------------

    def agree(self, finite: bool, nonzero: bool) -> tuple[bool, bool]:
        """(every rank's loss was finite, some rank has a non-zero gradient)."""
        if self.world == 1:
            return finite, nonzero
        import torch.distributed as dist

        flags = torch.tensor([float(not finite), float(nonzero)], device=_comm_device())
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return not bool(flags[0]), bool(flags[1])

    def every(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every rank."""
        if self.world == 1:
            return flag
        import torch.distributed as dist

        t = torch.tensor([float(flag)], device=_comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t[0])

    def sum_gradients(self, params: list[Tensor]) -> None:
        """DDP: every rank's ``.grad`` becomes the sum over ranks. A parameter that has a
        gradient on some rank gets one on every rank (AdamW treats None and 0 differently)."""
        if self.world == 1 or self.strategy != "ddp":
            return
        import torch.distributed as dist

        has = torch.tensor([float(p.grad is not None) for p in params], device=_comm_device())
        dist.all_reduce(has, op=dist.ReduceOp.MAX)
        live = [p for p, h in zip(params, has.tolist()) if h]
        for p in live:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        for bucket in _buckets([p.grad for p in live]):
            flat = torch.cat([g.reshape(-1) for g in bucket])
            dist.all_reduce(flat)
            offset = 0
            for g in bucket:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

    def sum_(self, t: Tensor) -> Tensor:
        """All-reduce (sum) ``t`` in place; for rows each rank filled disjointly."""
        if self.world > 1:
            import torch.distributed as dist

            buf = t.to(_comm_device())  # NCCL reduces only CUDA tensors
            dist.all_reduce(buf)
            t.copy_(buf)
        return t

    def gather_rows(self, local: Tensor, n: int, width: int) -> Tensor:
        """(n, width) from each rank's (share, ≤ width) block of rows, in rank order."""
        if self.world == 1:
            return local
        import torch.distributed as dist

        rows = math.ceil(n / self.world)
        block = torch.zeros(rows, width, dtype=local.dtype, device=_comm_device())
        block[:local.shape[0], :local.shape[1]] = local
        blocks = [torch.empty_like(block) for _ in range(self.world)]
        dist.all_gather(blocks, block)
        sizes = [len(DataParallel(r, self.world, self.strategy).share(n)) for r in range(self.world)]
        return torch.cat([b[:s] for b, s in zip(blocks, sizes)]).to(local.device)

    def combine_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Per-rank metric shares -> the mini-batch's: ``*_max`` / ``*_min`` by max / min, the
        rest (shares of a global mean) by sum. Keys absent on a rank (no rows) are skipped."""
        if self.world == 1:
            return metrics
        import torch.distributed as dist

        parts: list[dict[str, float]] = [{} for _ in range(self.world)]
        dist.all_gather_object(parts, metrics)
        out: dict[str, float] = {}
        for part in parts:
            for k, v in part.items():
                if k not in out:
                    out[k] = v
                elif k.endswith("_max"):
                    out[k] = max(out[k], v)
                elif k.endswith("_min"):
                    out[k] = min(out[k], v)
                else:
                    out[k] += v
        return out

    # -- models ----------------------------------------------------------------------------

    def wrap(self, model) -> Callable:
        """``run(fn, *args, **kwargs) -> fn(model, *args, **kwargs)``: how a role calls its model.

        Several ranks: ``model`` takes rank 0's weights first. FSDP: ``model`` is sharded in place first (one ``fully_shard`` unit per decoder layer;
        the embeddings, final norm and output head in the root unit, ``_Root``), and ``run``
        goes through the root so that its hooks fire. Gradients are reduce-scattered as sums.
        """
        if self.world > 1:
            self._broadcast_from_rank0(model)
        if not self.lockstep:
            return partial(_call, model)
        from torch.distributed.fsdp import fully_shard

        layers = set(getattr(model, "_no_split_modules", None) or [])
        for module in list(model.modules()):
            if type(module).__name__ in layers:
                fully_shard(module)
        root = fully_shard(_Root(model))
        for module in root.modules():
            if hasattr(module, "set_gradient_divide_factor"):
                module.set_gradient_divide_factor(1.0)  # a sum, not FSDP's default mean
                module.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM
        return root

    def _broadcast_from_rank0(self, model) -> None:
        """Every rank starts from rank 0's weights (as torch's DDP does): a freshly initialised
        part (a value head) need not come out the same from each rank's random state."""
        import torch.distributed as dist

        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                dist.broadcast(t.data, src=0)

    def full_state_dict(self, model) -> dict[str, Tensor]:
        """The whole model's weights as plain CPU tensors on rank 0 (merged when LoRA trains);
        {} on the other ranks under FSDP. A collective under FSDP: every rank must call it."""
        from rlxf.models.loading import merged_state_dict

        if not self.lockstep:
            return {k: v.detach().cpu() for k, v in merged_state_dict(model).items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_full_state_dict(self, model, state: dict[str, Tensor]) -> None:
        """Every rank loads the whole model's weights (FSDP keeps its shard of each)."""
        if not self.lockstep:
            model.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))

    def optimizer_state_dict(self, model, optimizer) -> dict:
        """The optimizer's state as one process's ``optimizer.state_dict()`` (indexed by
        parameter position), so a checkpoint reads the same under any number of ranks."""
        if not self.lockstep:
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full = get_optimizer_state_dict(model, optimizer,
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.rank != 0:
            return {}
        index = {name: i for i, name in enumerate(_trainable_names(model))}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[n] for n in g["params"]]}
                  for g in full["param_groups"]]
        return {"state": {index[n]: s for n, s in full["state"].items()}, "param_groups": groups}

    def load_optimizer_state_dict(self, model, optimizer, state: dict) -> None:
        """Load a one-process ``optimizer.state_dict()`` on every rank (FSDP keeps its shards)."""
        if not self.lockstep:
            optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = _trainable_names(model)
        full = {"state": {names[i]: s for i, s in state["state"].items()},
                "param_groups": [{**{k: v for k, v in g.items() if k != "params"},
                                  "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]}
        set_optimizer_state_dict(model, optimizer, full, options=StateDictOptions(full_state_dict=True))

    def scalar(self, t: Tensor) -> float:
        """A 0-dim tensor as a float; a sharded (DTensor) one is reduced first."""
        full = getattr(t, "full_tensor", None)
        return float(full() if callable(full) else t)


SINGLE = DataParallel()


def _call(model, fn: Callable, *args, **kwargs):
    return fn(model, *args, **kwargs)


class _Root(torch.nn.Module):
    """FSDP's root unit around a causal LM. rlxf's forwards call the trunk and the head
    separately (log-probs chunk the head), never the model's own ``forward``, so the root's
    hooks (lazy init, gathering the embeddings, norm and head, the last reduce-scatter after
    backward) need a forward around the whole computation: this one runs ``fn(model, ...)``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, fn: Callable, *args, **kwargs):
        return fn(self.model, *args, **kwargs)


def _trainable_names(model) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _buckets(tensors: list[Tensor]) -> list[list[Tensor]]:
    """Consecutive groups of same-dtype tensors of at most ``_BUCKET`` elements (or one bigger)."""
    out: list[list[Tensor]] = []
    size = 0
    for t in tensors:
        if out and size + t.numel() <= _BUCKET and out[-1][0].dtype == t.dtype:
            out[-1].append(t)
            size += t.numel()
        else:
            out.append([t])
            size = t.numel()
    return out


def _comm_device() -> torch.device:
    """Where small flag tensors live: NCCL reduces only CUDA tensors, gloo CPU ones."""
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
        else torch.device("cpu")


# ports ``free_address(hold=True)`` keeps bound in this process until ``tcp_store`` hosts a store on them
_held: dict[int, socket.socket] = {}


def free_address(host: str | None = None, *, hold: bool = False) -> tuple[str, int]:
    """``host`` (by default this host's name, resolved) and a free TCP port, for rank 0 to host
    the process group's store. Across machines pass the address the others reach this one by.

    A port released here can be taken by another process before the store binds it (the store
    then fails with EADDRINUSE). ``hold`` keeps it bound until this process's ``tcp_store``
    listens on it: for a rank 0 that asks for its own address (Ray's learner rank 0); a port
    handed to another process to host the store must be released (the default)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("", 0))
    port = s.getsockname()[1]
    if hold:
        _held[port] = s
    else:
        s.close()
    if host is None:
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = "127.0.0.1"
    return host, port


def tcp_store(address: str, port: int, world: int, is_master: bool, timeout: timedelta):
    """The ``TCPStore`` at ``address:port``; the master listens on the socket ``free_address(hold=True)``
    kept for ``port`` in this process, if it kept one, so no other process can have taken the port."""
    import torch.distributed as dist

    held = _held.pop(port, None) if is_master else None
    return dist.TCPStore(address, port, world, is_master=is_master, timeout=timeout,
                         master_listen_fd=held.detach() if held is not None else None)


def init_data_parallel(rank: int, world: int, address: str | None, port: int | None, strategy: Strategy,
                       backend: Literal["nccl", "gloo"] = "gloo") -> DataParallel:
    """Join the learners' process group (rank 0 hosts its store at ``address:port``)."""
    if world == 1:
        return DataParallel(strategy=strategy)
    import torch.distributed as dist
    from torch.distributed.constants import default_pg_timeout

    if backend == "nccl":
        torch.cuda.set_device(0)  # Ray shows each learner actor only its own GPU(s)
    store = tcp_store(address, port, world, is_master=rank == 0, timeout=default_pg_timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    return DataParallel(rank, world, strategy)

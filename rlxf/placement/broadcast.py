"""Weights from the learner to the engines by collective broadcast (``ray.weight_sync: collective``).

Learner rank 0 and every engine actor form a process group of their own (rank 0 = the learner),
separate from the learners' data-parallel group: it is built from a TCP store the learner hosts,
so neither side needs a default group, and it is rebuilt whenever an engine is replaced. Each
member builds it in a thread of its own (``Joining``) while the driver polls: building waits for
every member, so one that died before joining would otherwise hold the others for ``TIMEOUT``.
Weights travel as a few flat buffers per dtype, in the order of a manifest (names, shapes,
dtypes) the learner hands the engines once, through the driver; the engines unflatten them into
named tensors for ``Engine.update_weights``. NCCL where both ends have a GPU (GPU to GPU, no
host copy), gloo otherwise (``RayConfig.sync_backend``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

# a broadcast waits this long for a peer before failing, rather than gloo's 30 minutes: a dead
# engine should turn into a replaced engine, not a stalled run
TIMEOUT = timedelta(seconds=120)
_BUCKET_BYTES = 256 << 20


@dataclass(frozen=True)
class Manifest:
    """What the learner sends, in order: each tensor's name, shape and dtype."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[torch.dtype, ...]

    @classmethod
    def of(cls, weights: dict[str, Tensor]) -> Manifest:
        return cls(tuple(weights), tuple(tuple(t.shape) for t in weights.values()),
                   tuple(t.dtype for t in weights.values()))

    def buckets(self) -> list[list[int]]:
        """Indices of consecutive same-dtype tensors, at most ``_BUCKET_BYTES`` a bucket (or one)."""
        out: list[list[int]] = []
        size = 0
        for i, (shape, dtype) in enumerate(zip(self.shapes, self.dtypes)):
            nbytes = torch.Size(shape).numel() * dtype.itemsize
            if out and self.dtypes[out[-1][0]] == dtype and size + nbytes <= _BUCKET_BYTES:
                out[-1].append(i)
                size += nbytes
            else:
                out.append([i])
                size = nbytes
        return out


class WeightGroup:
    """One member of the learner -> engines broadcast group."""

    def __init__(self, address: str, port: int, rank: int, world: int, backend: str):
        from rlxf.trainer.distributed import tcp_store

        store = tcp_store(address, port, world, is_master=rank == 0, timeout=TIMEOUT)  # rank 0 held the port
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        if backend == "nccl":
            self.group = dist.ProcessGroupNCCL(store, rank, world)
        else:
            self.group = dist.ProcessGroupGloo(store, rank, world, TIMEOUT)
        self.rank = rank

    def _broadcast(self, flat: Tensor) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.group.broadcast([flat], opts).wait()

    def send(self, weights: dict[str, Tensor], manifest: Manifest) -> int:
        """Rank 0: broadcast ``weights`` (ordered as ``manifest``); returns the bytes sent."""
        tensors = list(weights.values())
        sent = 0
        for bucket in manifest.buckets():
            flat = torch.cat([tensors[i].detach().reshape(-1).to(self.device) for i in bucket])
            self._broadcast(flat)
            sent += flat.numel() * flat.element_size()
        return sent

    def receive(self, manifest: Manifest) -> dict[str, Tensor]:
        """An engine: the weights rank 0 broadcasts, by name."""
        out: dict[str, Tensor] = {}
        for bucket in manifest.buckets():
            sizes = [torch.Size(manifest.shapes[i]).numel() for i in bucket]
            flat = torch.empty(sum(sizes), dtype=manifest.dtypes[bucket[0]], device=self.device)
            self._broadcast(flat)
            for i, part in zip(bucket, torch.split(flat, sizes)):
                out[manifest.names[i]] = part.view(manifest.shapes[i])
        return out


class Joining:
    """A ``WeightGroup`` being built in a thread, so the actor keeps answering while it waits for
    the other members. A build the driver abandons (a member died before joining) fails in its
    thread after ``TIMEOUT``, unseen: the actor builds the next one meanwhile."""

    def __init__(self, *args):
        self._done = threading.Event()
        self._group: WeightGroup | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._build, args=args, daemon=True, name="rlxf-weight-group").start()

    def _build(self, *args) -> None:
        try:
            self._group = WeightGroup(*args)
        except BaseException as e:  # raised to the driver by ``wait``
            self._error = e
        finally:
            self._done.set()

    def wait(self, timeout: float) -> WeightGroup | None:
        """The group once built, None while still building (after ``timeout`` s); raises the
        build's error."""
        if not self._done.wait(timeout):
            return None
        if self._error is not None:
            raise self._error
        return self._group

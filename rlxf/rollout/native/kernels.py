"""The matmuls of the native engine's linear layers, picked once per engine.

On x86 CPUs torch's ``F.linear`` / ``addmm`` call MKL's sgemm; oneDNN, which torch also ships,
has its own kernels: about 2x the fp32 throughput on the AMD EPYC rlxf is developed on at decode
shapes, slower than MKL on an Intel Xeon. Its linear op also fuses what follows the matmul: the
residual add, and the SiLU gate times the up projection of the MLP. Both compute in IEEE fp32
(no reduced-precision modes are enabled).

``select_kernels("auto")`` uses oneDNN on CPU when the op exists and agrees with ``F.linear`` on
a probe, even where MKL measured faster: single-threaded, oneDNN rounds a row the same way
whatever the number of rows (``OneDNNKernels``), and MKL's sgemm does not (measured here on
the nano model: each request's log-probs came in two variants across batch compositions).
Seeded samples that do not depend on the batch are what let a resumed or asynchronous run,
whose requests are batched differently, repeat the uninterrupted one. Whether to keep the
weights packed is measured (``rlxf.models.kernel_choice``, once per machine, cached). Plain
torch otherwise (CUDA, builds without oneDNN).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlxf.models.kernel_choice import PACK_ROWS, machine_kernel_choice


class TorchKernels:
    """Plain torch: one fused gate/up matmul, SiLU and multiply, addmm for residual adds."""

    name = "torch"

    def linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(x, w, b)

    def linear_add(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, residual: torch.Tensor) -> torch.Tensor:
        """x @ w.T + b + residual."""
        out = torch.addmm(residual, x, w.t())
        return out if b is None else out.add_(b)

    def gated(self, x: torch.Tensor, wgu: torch.Tensor, bgu: torch.Tensor | None) -> torch.Tensor:
        """SiLU(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up), with ``wgu`` = [w_gate; w_up]."""
        gate, up = F.linear(x, wgu, bgu).chunk(2, dim=-1)
        return F.silu(gate).mul_(up)


class OneDNNKernels(TorchKernels):
    """oneDNN's linear with fused post-ops (CPU).

    Batch invariance: single-threaded, oneDNN computes a row of the output the same way for
    any number of rows >= 2, but takes another path (a matrix-vector product, rounding
    differently) for one row. A single row is therefore padded to two, so that a sequence's
    logits, and with them its seeded samples, do not depend on how many others share its batch.

    Bounded memory: oneDNN (and torch's ideep layer above it) caches a compiled primitive per
    distinct row count, up to 1024 of each, and the row counts of prefill (prompts x length)
    and decode (live sequences) take hundreds of values over a run: the process grew by ~600
    MB over 250 small calls of a 64-wide model. Rows are therefore padded to a few dozen
    sizes per octave (``padded_rows``; at most 12.5% more rows), which the same invariance
    makes bit-exact.
    """

    name = "onednn"
    PACK_ROWS = PACK_ROWS   # the batch-size hint oneDNN picks its blocked weight layout for

    def __init__(self, pack: bool = True):
        self._op = torch.ops.mkldnn._linear_pointwise
        self._reorder = getattr(torch.ops.mkldnn, "_reorder_linear_weight", None) if pack else None
        self._packs: dict[tuple, tuple[int, torch.Tensor]] = {}

    def _packed(self, w: torch.Tensor) -> torch.Tensor:
        """``w`` in oneDNN's blocked layout, reordered once and again only after ``w`` changes.

        Without it, oneDNN reorders the weight inside every call, which at decode's few rows
        costs about as much as the product (20-25% of a decode matmul measured here). The
        products are bit-identical either way. A weight's version counter (shared by its views,
        bumped by ``update_weights``' in-place copies) tells when to reorder again. Costs one
        more copy of the weights in memory, so it is a choice (``pack``; see ``EngineOptions``).
        """
        if self._reorder is None or w.requires_grad:
            return w
        key = (w.data_ptr(), tuple(w.shape), tuple(w.stride()))
        hit = self._packs.get(key)
        if hit is None or hit[0] != w._version:
            hit = (w._version, self._reorder(w.contiguous(), self.PACK_ROWS))
            self._packs[key] = hit  # decode threads may race here; both compute the same value
        return hit[1]

    @staticmethod
    def _padded(x: torch.Tensor, rows: int) -> torch.Tensor:
        if x.shape[0] == rows:
            return x
        if x.shape[0] == 1:
            return x.expand(rows, *x.shape[1:])
        return F.pad(x, (0, 0) * (x.dim() - 1) + (0, rows - x.shape[0]))

    def linear(self, x, w, b=None):
        m = x.shape[0]
        if m != padded_rows(m):
            return self.linear(self._padded(x, padded_rows(m)), w, b)[:m]
        return self._op(x, self._packed(w), b, "none", [], "")

    def linear_add(self, x, w, b, residual):
        m = x.shape[0]
        if m != padded_rows(m):
            rows = padded_rows(m)
            return self.linear_add(self._padded(x, rows), w, b, self._padded(residual, rows))[:m]
        return self._op.binary(x, residual, self._packed(w), b, "add")

    def gated(self, x, wgu, bgu):
        m = x.shape[0]
        if m != padded_rows(m):
            return self.gated(self._padded(x, padded_rows(m)), wgu, bgu)[:m]
        i = wgu.shape[0] // 2
        gate = self._op(x, self._packed(wgu[:i]), None if bgu is None else bgu[:i], "swish", [], "")
        return self._op.binary(x, gate, self._packed(wgu[i:]), None if bgu is None else bgu[i:], "mul")


def padded_rows(m: int) -> int:
    """The row count ``OneDNNKernels`` runs ``m`` rows as: 2 for 1 (see its docstring), ``m`` up
    to 16, else ``m`` rounded up to 3 significant bits (8 sizes per octave, <= 12.5% more rows)."""
    if m <= 16:
        return 2 if m == 1 else m
    step = 1 << (m.bit_length() - 4)
    return -(-m // step) * step


def _probe(k: TorchKernels, dtype: torch.dtype) -> bool:
    """Whether ``k`` runs here and agrees with plain torch (random small problem)."""
    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(5, 16, generator=g).to(dtype), torch.randn(5, 8, generator=g).to(dtype)
    w, b = torch.randn(8, 16, generator=g).to(dtype), torch.randn(8, generator=g).to(dtype)
    wgu = torch.randn(16, 16, generator=g).to(dtype)
    ref = TorchKernels()
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    try:
        pairs = [(k.linear(x, w, b), ref.linear(x, w, b)), (k.linear_add(x, w, b, res), ref.linear_add(x, w, b, res)),
                 (k.gated(x, wgu, None), ref.gated(x, wgu, None))]
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return all(a.shape == r.shape and torch.allclose(a.float(), r.float(), atol=tol, rtol=tol) for a, r in pairs)


def select_kernels(device: torch.device, dtype: torch.dtype, prefer: str = "auto", *,
                   pack: bool | None = True) -> TorchKernels:
    """oneDNN on CPU when it works (``"auto"`` and ``"onednn"``; see the module docstring for
    why ``auto`` does not ask which is faster), plain torch otherwise. ``pack``: oneDNN keeps
    its weights reordered (one more copy of them in memory); None: when that measured faster
    here."""
    if prefer not in ("auto", "onednn", "torch"):
        raise ValueError(f"unknown kernels {prefer!r}; valid: auto, onednn, torch")
    measured = machine_kernel_choice() if device.type == "cpu" and dtype == torch.float32 and pack is None \
        and prefer != "torch" else None
    if pack is None:
        pack = measured.pack if measured is not None else True
    if prefer != "torch" and device.type == "cpu" and dtype in (torch.float32, torch.bfloat16) \
            and torch.backends.mkldnn.is_available():
        try:
            k = OneDNNKernels(pack=pack)
        except (AttributeError, RuntimeError):
            k = None
        if k is not None and _probe(k, dtype):
            # the probe's weights are freed: a later tensor at one of their addresses, of the
            # same shape and version, would otherwise find their packed copy
            k._packs.clear()
            return k
    if prefer == "onednn":
        raise RuntimeError("oneDNN linear kernels are not usable here (not a CPU, or this torch build lacks them)")
    return TorchKernels()

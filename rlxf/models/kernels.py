"""oneDNN matmuls for the linear layers of models trained on CPU (forward and backward).

On x86 CPUs torch's ``F.linear`` calls MKL's sgemm; oneDNN, which torch also ships, has its
own kernels. Which is faster depends on the CPU. On the AMD EPYC rlxf is developed on (AVX2)
oneDNN was faster (2 threads, fp32, 2048 tokens, 512 -> 512): forward 187 -> 475 GFLOP/s,
input gradient 196 -> 414, weight gradient 201 -> 350 (oneDNN reads the transposed operands in
place); on an Intel Xeon it ran at 0.86x of MKL. So ``auto`` measures on the machine it runs on
(``rlxf.models.kernel_choice``). The rollout engine's
kernels (``rlxf.rollout.native.kernels``) use the same op for decoding; this module gives the
trainer's forward/backward the same speed.

Both paths compute in IEEE fp32 (no reduced-precision modes); the results differ from MKL's by
float rounding only. ``use_fast_linears(model)`` swaps the class of every ``nn.Linear`` in a CPU
fp32 model for :class:`OneDNNLinear` (a subclass: state dicts, PEFT wrapping, ``isinstance``
and deep copies are unchanged), after checking on a probe problem that the op exists here and
agrees with ``F.linear`` in values and gradients. Anything else (CUDA, bf16, builds without
oneDNN) keeps ``F.linear``.
"""

from __future__ import annotations

import functools
import logging
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

LinearKernels = Literal["auto", "onednn", "torch"]


def _op(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x @ w.T + b with oneDNN; x and w are 2-D and may be transposed views."""
    return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")


class _OneDNNLinearFn(torch.autograd.Function):
    """y = x W^T + b, with dx = dy W, dW = dy^T x and db = sum(dy) all on oneDNN (x, dy: 2-D)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _op(x, weight, bias)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight = ctx.saved_tensors
        dy = dy.contiguous()
        dx = _op(dy, weight.t(), None) if ctx.needs_input_grad[0] else None
        dw = _op(dy.t(), x.t(), None) if ctx.needs_input_grad[1] else None
        db = dy.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db


class OneDNNLinear(nn.Linear):
    """An ``nn.Linear`` whose matmuls run on oneDNN (CPU, fp32); made by :func:`use_fast_linears`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32 or self.weight.dtype != torch.float32 \
                or x.numel() == 0:
            return F.linear(x, self.weight, self.bias)
        lead = x.shape[:-1]
        y = _OneDNNLinearFn.apply(x.reshape(-1, x.shape[-1]).contiguous(), self.weight, self.bias)
        return y.reshape(*lead, y.shape[-1])


@functools.cache
def onednn_linear_works() -> bool:
    """Whether the oneDNN op runs here and matches ``F.linear`` in values and all gradients."""
    if not torch.backends.mkldnn.is_available():
        return False
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 16, generator=g, dtype=torch.float64).float()
    w, b = torch.randn(5, 16, generator=g).float(), torch.randn(5, generator=g).float()
    dy = torch.randn(2, 7, 5, generator=g)
    results = []
    for fast in (True, False):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        try:
            y = _OneDNNLinearFn.apply(xs.reshape(-1, 16), ws, bs).reshape(2, 7, 5) if fast else F.linear(xs, ws, bs)
            y.backward(dy)
        except (RuntimeError, AttributeError, NotImplementedError):
            return False
        results.append((y.detach(), xs.grad, ws.grad, bs.grad))
    return all(torch.allclose(a, r, atol=1e-4, rtol=1e-4) for a, r in zip(*results, strict=True))


def use_fast_linears(model: nn.Module, kernels: LinearKernels = "auto") -> int:
    """Run ``model``'s ``nn.Linear`` layers on oneDNN when it is on CPU in fp32; returns how many.

    ``auto``: when the model's parameters are CPU fp32, the op passes its probe and oneDNN
    measured faster than torch's own kernels on this machine (``rlxf.models.kernel_choice``,
    measured once and cached), else leave the model as it is. ``onednn``: use it whenever it
    can be used, and raise when it cannot. ``torch``: leave.
    """
    if kernels not in ("auto", "onednn", "torch"):
        raise ValueError(f"unknown linear kernels {kernels!r}; valid: auto, onednn, torch")
    if kernels == "torch":
        return 0
    param = next(model.parameters(), None)
    usable = param is not None and param.device.type == "cpu" and param.dtype == torch.float32 \
        and onednn_linear_works()
    if usable and kernels == "auto":
        from rlxf.models.kernel_choice import machine_kernel_choice

        usable = machine_kernel_choice().trainer == "onednn"
    if not usable:
        if kernels == "onednn":
            raise RuntimeError("oneDNN linear kernels need a CPU float32 model and a torch build with oneDNN")
        log.info("%s: linear layers on torch's own kernels (linear_kernels=%s)", type(model).__name__, kernels)
        return 0
    count = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = OneDNNLinear
            count += 1
    log.info("%s: %d linear layers on oneDNN (linear_kernels=%s)", type(model).__name__, count, kernels)
    return count

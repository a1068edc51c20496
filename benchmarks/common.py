"""What the benchmark scripts share: the machine they ran on and its measured fp32 matmul peak."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), printed with every measured figure."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def load_average() -> str:
    """1-, 5- and 15-minute load averages: how busy the (shared) machine was while measuring."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def matmul_peak(threads: int, sizes: tuple[int, ...] = (1024, 2048), reps: int = 5) -> float:
    """Best fp32 FLOP/s of square matmuls on ``threads`` threads, over torch.mm (MKL) and oneDNN's
    linear (both ship with torch; rlxf's engine and trainer use oneDNN on CPU, which runs AVX-512
    on AMD CPUs where MKL runs AVX2, about 2x here). The peak any kernel reaches is the fair
    denominator for a model-FLOPs utilisation."""
    import torch

    torch.set_num_threads(threads)
    best = 0.0
    for size in sizes:
        a, b = torch.randn(size, size), torch.randn(size, size)
        for kernel in _kernels():
            kernel(a, b)
            for _ in range(reps):
                t = time.perf_counter()
                kernel(a, b)
                best = max(best, 2 * size**3 / (time.perf_counter() - t))
    return best


def _kernels() -> list:
    import torch

    kernels = [torch.mm]
    try:
        op = torch.ops.mkldnn._linear_pointwise
        x = torch.randn(8, 8)
        op(x, x, None, "none", [], "")
        kernels.append(lambda a, b: op(a, b, None, "none", [], ""))   # a @ b.T: the same work
    except (AttributeError, RuntimeError):
        pass
    return kernels

"""What ``linear_kernels: auto`` picks on this machine: measured once, cached per machine.

Whether oneDNN beats torch's own fp32 matmuls (MKL's sgemm on x86) depends on the CPU: on
the AMD EPYC this project is developed on oneDNN's training forward+backward ran about 2x
MKL's rate, on an Intel Xeon 0.86x (issue 17.15). No rule of thumb by vendor survives the next
CPU generation, so ``auto`` measures, side by side in one short calibration (well under a
second on an idle machine), the three choices it makes:

- **trainer**: a linear layer's forward + backward (``OneDNNLinear`` vs ``F.linear``);
- **engine**: a decode-sized matmul (few rows) of the native engine, oneDNN vs ``F.linear``,
  reported only: the engine runs oneDNN wherever it works, because oneDNN rounds a row the same
  way whatever the number of rows and MKL does not (``rlxf.rollout.native.kernels``);
- **pack**: whether oneDNN's pre-reordered (blocked) weights beat reordering in every call.

The result is cached as JSON under ``$XDG_CACHE_HOME/rlxf`` (default ``~/.cache/rlxf``),
keyed by the CPU model, the torch version, the thread count and the oneDNN/MKL instruction-set
settings (``ONEDNN_MAX_CPU_ISA``, ...), so every later run on the machine makes the same choice
(and rounds the same way: a run stays reproducible on its machine, and a resume exact) without
measuring again. Where that directory cannot be written (a read-only home in a container), the
file goes to ``<tempdir>/rlxf-<uid>`` instead; where neither can, every process measures again,
its choice may differ from the last one, and a warning says so. Delete the file to measure
again; set ``model.linear_kernels`` to ``onednn`` or ``torch`` to choose the trainer's by hand.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

PACK_ROWS = 64  # the batch-size hint oneDNN picks its blocked weight layout for (engine decode)
CACHE_VERSION = 1


@dataclass(frozen=True)
class KernelChoice:
    """The kernels ``auto`` uses on one machine, and the measurements behind them (ms per call)."""

    trainer: str                    # "onednn" or "torch": the trainer's linear layers (fp32 CPU)
    engine: str                     # "onednn" or "torch": faster at the engine's matmuls (reported)
    pack: bool                      # engine keeps oneDNN weights reordered (when it uses oneDNN)
    trainer_ms: dict[str, float]    # {"onednn": ..., "torch": ...}; empty when not measured
    engine_ms: dict[str, float]     # {"onednn": ..., "onednn_packed": ..., "torch": ...}
    cpu: str
    torch_version: str
    threads: int
    note: str = ""                  # why nothing was measured (no oneDNN op here), if so

    def reasons(self) -> list[str]:
        """One line per choice: what was picked and the measurement that decided it."""
        if not self.trainer_ms:
            return [f"trainer linear layers: torch ({self.note})", f"engine matmuls: torch ({self.note})"]

        def versus(ms: dict[str, float], a: str, b: str) -> str:
            return f"{a} {ms[a]:.3f} ms vs {b} {ms[b]:.3f} ms, {ms[b] / ms[a]:.2f}x"

        t = self.trainer_ms
        # the engine's oneDNN candidate is its faster layout (packed or not)
        onednn = "onednn_packed" if self.pack else "onednn"
        e = {**self.engine_ms, "onednn": self.engine_ms[onednn]}
        other = {"onednn": "torch", "torch": "onednn"}
        lines = [f"trainer linear layers: {self.trainer} (forward+backward, 256 tokens x 512 -> 512: "
                 f"{versus(t, self.trainer, other[self.trainer])})",
                 f"engine matmuls: onednn whether or not it is faster, so that a sequence's samples do not depend on "
                 f"its batch (16-row decode matmul, 512 -> 1536: {versus(e, self.engine, other[self.engine])})"]
        e = self.engine_ms
        packed, plain = ("onednn_packed", "onednn") if self.pack else ("onednn", "onednn_packed")
        lines.append(f"engine weight packing: {'on' if self.pack else 'off'} ({versus(e, packed, plain)})")
        return lines


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo spells it (or what the platform says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlxf"


def fallback_cache_dir() -> Path:
    """Where the choice is kept when ``cache_dir()`` cannot be written: per user, under the temp dir."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"rlxf-{uid}"


# Settings that change which kernels oneDNN and MKL run (``ONEDNN_MAX_CPU_ISA=AVX2`` on an AVX-512
# CPU): a choice measured under one does not hold under another
ISA_SETTINGS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


def cache_file(directory: Path | None = None) -> Path:
    """``kernels-<hash>.json`` for this CPU model, torch version, thread count and ISA settings."""
    isa = ",".join(f"{k}={os.environ[k]}" for k in ISA_SETTINGS if os.environ.get(k))
    key = f"{CACHE_VERSION}|{cpu_model()}|{torch.__version__}|{torch.get_num_threads()}" + (f"|{isa}" if isa else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (directory or cache_dir()) / f"kernels-{digest}.json"


def _onednn_op_works() -> bool:
    from rlxf.models.kernels import onednn_linear_works

    return onednn_linear_works() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def _best_ms(fns: dict[str, Callable[[], object]], calls: int, repeats: int) -> dict[str, float]:
    """Best of ``repeats`` of the time per call, the candidates interleaved: load on a shared
    machine only ever adds time, so the minimum is the closest to what each kernel can do."""
    for fn in fns.values():  # warm-up: first-call allocations, oneDNN primitive creation
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - start) * 1e3 / calls)
    return {name: min(s) for name, s in samples.items()}


def calibrate() -> KernelChoice:
    """Measure the three choices here (fp32, torch's current thread count): well under a second
    on an idle 2-core machine, a few seconds on a loaded one; once per machine."""
    base = {"cpu": cpu_model(), "torch_version": torch.__version__, "threads": torch.get_num_threads()}
    if not _onednn_op_works():
        return KernelChoice("torch", "torch", False, {}, {}, note="no usable oneDNN linear op in this torch build",
                            **base)
    from rlxf.models.kernels import _OneDNNLinearFn

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(256, 512, generator=g), torch.randn(512, 512, generator=g)
    dy = torch.randn(256, 512, generator=g)

    def train_step(fn) -> Callable[[], None]:
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        return lambda: fn(xs, ws).backward(dy)

    trainer_ms = _best_ms({"onednn": train_step(lambda a, b: _OneDNNLinearFn.apply(a, b, None)),
                             "torch": train_step(lambda a, b: F.linear(a, b))}, calls=2, repeats=5)
    op = torch.ops.mkldnn._linear_pointwise
    xd, wd = torch.randn(16, 512, generator=g), torch.randn(1536, 512, generator=g)
    packed = torch.ops.mkldnn._reorder_linear_weight(wd, PACK_ROWS)
    engine_ms = _best_ms({"onednn": lambda: op(xd, wd, None, "none", [], ""),
                            "onednn_packed": lambda: op(xd, packed, None, "none", [], ""),
                            "torch": lambda: F.linear(xd, wd)}, calls=20, repeats=5)
    fastest_onednn = min(engine_ms["onednn"], engine_ms["onednn_packed"])
    return KernelChoice(
        trainer="onednn" if trainer_ms["onednn"] < trainer_ms["torch"] else "torch",
        engine="onednn" if fastest_onednn < engine_ms["torch"] else "torch",
        pack=engine_ms["onednn_packed"] < engine_ms["onednn"],
        trainer_ms=trainer_ms, engine_ms=engine_ms, **base)


def _read(path: Path) -> KernelChoice | None:
    try:
        return KernelChoice(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):  # absent, torn or from another version: measure again
        return None


def _write(path: Path, choice: KernelChoice) -> bool:
    """Write ``choice`` to ``path`` atomically; False where that cannot be done (read-only)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(asdict(choice), indent=2) + "\n")
        tmp.replace(path)  # atomic: a concurrent reader sees the old file or the new one
        return True
    except OSError:
        return False


@functools.cache
def _cached(paths: tuple[Path, ...], measure: Callable[[], KernelChoice]) -> KernelChoice:
    """The first of ``paths`` that holds a choice, or a new measurement written to the first
    that can be written."""
    for path in paths:
        if (choice := _read(path)) is not None:
            return choice
    choice = measure()
    if not any(_write(path, choice) for path in paths):
        log.warning("could not save the kernel calibration to %s: every process measures again, and a close "
                    "measurement may choose other kernels (other rounding: reruns and resumes are then not "
                    "bit-identical); make one of them writable, or set model.linear_kernels",
                    " or ".join(str(p.parent) for p in paths))
    return choice


def cache_files() -> tuple[Path, ...]:
    """Where this machine's choice is looked for, in order: the user's cache, then the fallback."""
    return cache_file(), cache_file(fallback_cache_dir())


def machine_kernel_choice(path: Path | None = None,
                          measure: Callable[[], KernelChoice] = calibrate) -> KernelChoice:
    """This machine's choice: read from the cache file, or measured once and written there."""
    return _cached((path,) if path is not None else cache_files(), measure)


def explain(linear_kernels: str, device: str, dtype: str) -> list[str]:
    """What ``rlxf explain`` says about the kernels a config gets here, and why."""
    cpu_fp32 = device in ("auto", "cpu") and dtype in ("auto", "float32") and not (
        device == "auto" and torch.cuda.is_available())
    if not cpu_fp32:
        return [f"model.device={device}, model.dtype={dtype}: not a CPU float32 model, so torch's own "
                "kernels (the oneDNN choice applies to CPU fp32 only)"]
    paths = cache_files()
    cached = next((p for p in paths if p.exists()), None)
    choice = machine_kernel_choice()
    written = next((p for p in paths if p.exists()), None)
    where = (f"read from {cached}" if cached else f"now cached in {written}" if written
             else f"not saved: neither {paths[0].parent} nor {paths[1].parent} can be written")
    head = f"measured on this machine ({choice.cpu}, torch {choice.torch_version}, {choice.threads} threads), {where}"
    lines = [head]
    reasons = choice.reasons()
    if linear_kernels != "auto":
        reasons[0] = f"trainer linear layers: {linear_kernels} (set by model.linear_kernels)"
    return lines + reasons

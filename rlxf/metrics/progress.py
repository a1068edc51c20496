"""A live progress line for long work: step, reward, accuracy, KL, tokens/s, ETA."""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from rlxf.run_dir import QuietConsole

log = logging.getLogger("rlxf")


def _fmt(metrics: dict[str, Any], key: str, spec: str) -> str:
    """``metrics[key]`` formatted by ``spec``; "-" when absent, and as it is when no number
    (NaN stays "nan": a progress line must never be what stops a run)."""
    value = metrics.get(key)
    if value is None:
        return "-"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


class _MetricsBelow(Progress):
    """The bar on one line, the metrics on the next, wrapped at the terminal's width. In one row
    the metrics (80 characters with a mixture's sources) pushed the step count, the bar and the
    ETA off an 80-column terminal. The metrics are plain text: they hold source names, and
    rich would read "[hard]" as a style."""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            if task.description:
                yield Text(task.description)


class ProgressDisplay:
    """A rich progress bar with the latest headline metrics on the line below it.

    Disabled (writes nothing) when ``enabled`` is False or stderr is not a terminal; a plain
    metrics line is then printed every ``log_every`` steps instead, so logs stay readable.
    """

    FIELDS = (("reward", "reward/mean", ".3f"), ("acc", "accuracy", ".3f"), ("kl", "kl", ".4f"),
              ("tok/s", "throughput/tokens_per_s", ",.0f"))
    SFT_FIELDS = (("loss", "sft/loss", ".4f"), ("eval acc", "eval/accuracy", ".3f"),
                  ("tok/s", "throughput/tokens_per_s", ",.0f"))

    def __init__(self, total: int, start: int = 0, *, enabled: bool = True, log_every: int = 1,
                 console: Console | None = None, fields: tuple[tuple[str, str, str], ...] | None = None,
                 max_seconds: float | None = None, spent: float = 0.0):
        self.max_seconds = max_seconds  # a time limit ends the work first when it is the nearer end
        self.spent = spent  # of max_seconds, before this display (a resumed run's training time so far)
        self._last_eval = ""
        self.fields = fields or self.FIELDS
        self.console = console or QuietConsole(stderr=True)
        self.total = total
        self.log_every = log_every
        self.live = enabled and sys.stderr.isatty()
        self._t0 = time.perf_counter()
        self._start = start
        self._progress: Progress | None = None
        if self.live:
            self._progress = _MetricsBelow(
                TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(bar_width=None), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), console=self.console, transient=False, expand=True,
            )
            # a time-limited run has no step count to reach: an open-ended bar, no ETA
            self._task = self._progress.add_task("", total=None if max_seconds is not None else total,
                                                 completed=start)
            self._progress.start()

    def summary(self, metrics: dict[str, Any]) -> str:
        line = "  ".join(f"{label} {_fmt(metrics, key, spec)}" for label, key, spec in self.fields)
        return line + self._eval_part(metrics)

    def _eval_part(self, metrics: dict[str, Any]) -> str:
        """The latest held-out accuracy, per source in a mixture (``eval mean 0.61 (a 0.70, b 0.52)``),
        kept on the line between evals so forgetting shows on every line, not once per eval."""
        if "eval/accuracy" in metrics:
            sources = {k[len("eval/"):-len("/accuracy")]: v for k, v in metrics.items()
                       if k.startswith("eval/") and k.endswith("/accuracy") and k.count("/") == 2}
            if sources:
                per = ", ".join(f"{name} {_fmt(sources, name, '.2f')}" for name in sorted(sources))
                mean = _fmt(metrics, "eval/source_mean_accuracy", ".3f")
                self._last_eval = f"  eval mean {mean} ({per})"
            else:
                self._last_eval = f"  eval acc {_fmt(metrics, 'eval/accuracy', '.3f')}"
        if any(label == "eval acc" for label, _, _ in self.fields):
            return ""  # the fields show it already (SFT)
        return self._last_eval

    def update(self, step: int, metrics: dict[str, Any]) -> None:
        try:
            self._show(step, metrics)
        except OSError as e:  # a terminal that hung up (EIO): the run goes on, silent here
            self._silence(e)

    def _silence(self, e: OSError) -> None:
        if not self.console.quiet:
            self.console.quiet = True
            log.warning("the progress display cannot write to the terminal (%s); the run goes on, and its log "
                        "and metrics.jsonl say how it does", e)

    def _show(self, step: int, metrics: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=step, description=self.summary(metrics))
        elif step % self.log_every == 0 or step == self.total:
            done = step - self._start
            elapsed = time.perf_counter() - self._t0
            # nothing done yet (the first line, or a resume at its last step) measures no speed
            eta = 0.0 if step >= self.total else elapsed / done * (self.total - step) if done > 0 else math.inf
            if self.max_seconds is not None:
                eta = min(eta, max(0.0, self.max_seconds - self.spent - elapsed))
            # one line per step whatever the width (a log file is read, and grepped, by line); no
            # markup: source names are the user's, and "[hard]" would vanish as a style tag
            eta_text = f"{eta:.0f}s" if math.isfinite(eta) else "-"
            self.console.print(f"step {step}/{self.total}  {self.summary(metrics)}  eta {eta_text}",
                               highlight=False, markup=False, soft_wrap=True)

    def close(self) -> None:
        if self._progress is not None:
            progress, self._progress = self._progress, None
            try:
                progress.stop()
            except OSError as e:
                self._silence(e)

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

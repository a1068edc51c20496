"""The live progress bar on an 80-column terminal: a mixture's metrics (about 80 characters)
shared the bar's row and pushed the step count, the bar and the ETA off the screen."""

from __future__ import annotations

import io
import re
import sys

import pytest
from rich.console import Console

from rlxf.metrics.progress import ProgressDisplay

MIXTURE = {"reward/mean": 0.5, "accuracy": 0.3, "kl": 0.001, "throughput/tokens_per_s": 12345.0,
           "eval/accuracy": 0.5, "eval/source_mean_accuracy": 0.5, "eval/arith/accuracy": 0.4,
           "eval/gsm8k/accuracy": 0.6}


@pytest.mark.parametrize("width", [40, 80])
def test_a_narrow_terminal_keeps_the_step_count_the_eta_and_every_metric(monkeypatch, width):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    out = io.StringIO()
    with ProgressDisplay(100, console=Console(file=out, force_terminal=True, color_system=None, width=width)) as p:
        p.update(7, MIXTURE)
    final = out.getvalue().rsplit("\x1b[2K", 1)[-1]          # the last frame drawn
    lines = final.replace("\x1b[?25h", "").rstrip("\n").split("\n")
    assert re.match(r"step +7/100 ", lines[0]) and "ETA" in lines[0], final
    metrics = " ".join(line.strip() for line in lines[1:])   # wrapped at the width, nothing cut off
    assert "reward 0.500" in metrics and "tok/s 12,345" in metrics and "gsm8k 0.60)" in metrics, final
    assert all(len(line) <= width for line in lines), final

"""A resumed run's progress line counts the training time before the resume against its budget."""

from __future__ import annotations

import io
import re

from rich.console import Console

from rlxf.metrics.progress import ProgressDisplay


def test_the_eta_of_a_resumed_time_limited_run_is_what_is_left_of_its_budget():
    """60 s budget, 50 s trained before the resume: at most 10 s to go (it used to say up to 60)."""
    out = io.StringIO()
    with ProgressDisplay(1_000_000, 5, enabled=False, console=Console(file=out, width=200), max_seconds=60.0,
                         spent=50.0, fields=ProgressDisplay.SFT_FIELDS) as p:
        p.update(6, {"sft/loss": 1.0})
    assert 0 <= float(re.search(r"eta (\d+)s", out.getvalue()).group(1)) <= 10

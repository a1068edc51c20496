"""Found by review: TensorBoard after a resume, and a report of values at the edge of float range."""

from __future__ import annotations

import pytest

from rlxf.metrics.report import Plot, RunMetrics, headline_rows
from rlxf.metrics.report_plots import line_plot, png
from rlxf.metrics.sinks import build_sinks


def test_a_resumed_run_replaces_the_killed_runs_tensorboard_steps(tmp_path):
    """Killed after step 5, resumed from the checkpoint of step 3: steps 4 and 5 are logged again,
    and TensorBoard shows them once, with the resumed run's values (as metrics.jsonl does)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = build_sinks(["tensorboard"], tmp_path, project="p", run_name="r", config={})
    for step in range(1, 6):
        sink.log(step, {"loss": float(step)})
    sink.close()
    sink = build_sinks(["tensorboard"], tmp_path, project="p", run_name="r", config={})
    for step in (4, 5, 6):
        sink.log(step, {"loss": 100.0 + step})
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 104.0),
                                                                  (5, 105.0), (6, 106.0)]



def test_values_at_the_edge_of_float_range_do_not_stop_the_report():
    """A loss that diverged to ±1e308 is counted as not drawn, like inf; the plot and the
    headline (which shows it) still come out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = RunMetrics("r", [{"step": 1, "policy/loss": -1e308, "reward/mean": 0.5},
                           {"step": 2, "policy/loss": 1e308, "reward/mean": 0.25},
                           {"step": 3, "policy/loss": 1.5, "reward/mean": 1e308}])
    assert run.series("policy/loss") == ([3], [1.5]) and run.non_finite("policy/loss") == 2
    for keys in (("policy/loss",), ("reward/mean",)):
        fig = line_plot(Plot("t", keys, "y"), [run])
        png(fig)   # the ticks are computed when drawn: here the old code raised
        plt.close(fig)
    assert headline_rows([run])[1][2] == "1e+308"   # reward/mean (last)


def test_a_progress_line_before_any_step_has_an_unknown_eta_not_nan():
    import io

    from rich.console import Console

    from rlxf.metrics.progress import ProgressDisplay

    out = io.StringIO()
    with ProgressDisplay(5, start=0, enabled=False, console=Console(file=out, width=200)) as p:
        p.update(0, {"eval/accuracy": 0.5})   # an evaluation before training
        p.update(5, {})
    first, last = out.getvalue().splitlines()
    assert first.endswith("eval acc 0.500  eta -") and last.endswith("eta 0s")


def test_nested_non_finite_values_are_written_as_strings():
    """samples.jsonl holds scores and episode infos: a NaN at any depth must not stop the run."""
    import json

    from rlxf.metrics.sinks import encode_line

    line = encode_line({"a": float("nan"), "scores": {"judge": float("inf"), "parts": [1.0, float("-inf")]}})
    assert json.loads(line) == {"a": "nan", "scores": {"judge": "inf", "parts": [1.0, "-inf"]}}

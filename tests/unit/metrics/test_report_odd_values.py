"""report.html and the progress line survive what a user's names and a run's numbers can hold:
`$` and `_` in names, NaN/inf, records that are not objects, steps that are not numbers, and
rich markup brackets in source names."""

from __future__ import annotations

import io
import json
import math
import sys
import warnings

import pytest
from rich.console import Console

from rlxf.cli.main import main
from rlxf.metrics.progress import ProgressDisplay
from rlxf.metrics.report import Plot, RunMetrics, headline_rows, write_report
from rlxf.metrics.report_plots import line_plot
from rlxf.metrics.sinks import DamagedFileError, encode_line, read_jsonl


def _run(path, records, samples=None):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_bytes(b"".join(encode_line(r) for r in records))
    if samples is not None:
        (path / "samples.jsonl").write_bytes(b"".join(encode_line(s) for s in samples))
    return path


def test_dollar_signs_in_a_source_or_run_name_do_not_stop_the_report(tmp_path):
    # matplotlib reads a pair of $ as math: "a$b_{$" used to end `rlxf report` with a parse error
    run = _run(tmp_path / "cost$a$", [{"step": 1, "eval/accuracy": 0.5, "eval/a$b_{$/accuracy": 0.5,
                                       "time/step": 1.0, "time/train": 1.0}])
    other = _run(tmp_path / "b", [{"step": 1, "eval/$\\frac$/accuracy": 0.25}])
    assert main(["report", str(run), str(other), "--out", str(tmp_path / "r.html")]) == 0


def test_a_run_named_with_a_leading_underscore_keeps_its_legend_entry():
    import matplotlib

    matplotlib.use("Agg")
    runs = [RunMetrics("_baseline", [{"step": 1, "reward/mean": 0.1}]), RunMetrics("b", [{"step": 1, "reward/mean": 0.2}])]
    fig = line_plot(Plot("Reward", ("reward/mean",), "mean reward"), runs)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("_baseline: reward/mean" in label for label in labels), labels


def test_a_metrics_line_that_is_not_an_object_is_a_damaged_file_named_by_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n[1, 2]\n')
    with pytest.raises(DamagedFileError, match=r"metrics.jsonl, line 2: a JSON list"):
        read_jsonl(run / "metrics.jsonl")
    assert main(["report", str(run)]) == 2     # a message, not a TypeError


def test_steps_that_are_not_numbers_do_not_stop_the_report(tmp_path):
    run = _run(tmp_path / "run", [{"step": None, "reward/mean": 0.1}, {"step": "x", "reward/mean": 0.2},
                                  {"reward/mean": 0.3}, {"step": 4, "reward/mean": 0.4}],
               samples=[{"step": "x", "reward": 1.0, "prompt": "p", "response": "r"},
                        {"step": 2, "reward": float("nan"), "prompt": "p", "response": "r"},
                        {"step": 2, "reward": 0.5, "prompt": "p", "response": "r"}])
    assert main(["report", str(run)]) == 0
    assert headline_rows([RunMetrics("run", read_jsonl(run / "metrics.jsonl"))])[1][1] == "4"


def test_a_final_nan_is_shown_not_hidden_behind_the_last_finite_value(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    run = _run(tmp_path / "run", [{"step": 1, "reward/mean": 0.5, "kl": float("inf")},
                                  {"step": 2, "reward/mean": float("nan"), "kl": float("nan")}])
    metrics = RunMetrics("run", read_jsonl(run / "metrics.jsonl"))   # NaN comes back as the string "nan"
    header, row = headline_rows([metrics])
    assert row[header.index("reward/mean (last)")] == "nan"
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # no "No artists with labels" for a plot of NaNs only
        fig = line_plot(Plot("KL", ("kl",), "KL"), [metrics])
    texts = [t.get_text() for t in fig.axes[0].texts] + [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "no finite values" in texts and any("2 NaN/inf not drawn" in t for t in texts), texts
    assert math.isnan(metrics.last("reward/mean"))


SOURCES = {"eval/accuracy": 0.5, "eval/source_mean_accuracy": 0.5, "eval/train[hard]/accuracy": 0.5,
           "eval/[@a=(]/accuracy": 0.25}


def test_plain_progress_line_shows_source_names_verbatim_on_one_line():
    out = io.StringIO()
    progress = ProgressDisplay(10, enabled=False, console=Console(file=out, width=40))
    progress.update(1, {"reward/mean": "nan", **SOURCES})       # a value that is no number does not raise
    text = out.getvalue()
    assert "train[hard] 0.50" in text and "[@a=(] 0.25" in text and "reward nan" in text
    assert text.count("\n") == 1, text                          # not wrapped at the console width


def test_live_progress_bar_shows_source_names_verbatim(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    out = io.StringIO()
    with ProgressDisplay(10, console=Console(file=out, force_terminal=True, width=300)) as progress:
        progress.update(1, SOURCES)
    assert "train[hard] 0.50" in out.getvalue()


def test_per_source_accuracy_without_their_mean_does_not_raise():
    out = io.StringIO()
    ProgressDisplay(10, enabled=False, console=Console(file=out)).update(1, {"eval/accuracy": 0.5, "eval/a/accuracy": 0.4})
    assert "a 0.40" in out.getvalue()


def test_report_of_records_as_rlxf_writes_them_round_trips_nan(tmp_path):
    run = _run(tmp_path / "run", [{"step": 1, "sft/loss": float("nan")}])
    assert json.loads((run / "metrics.jsonl").read_text())["sft/loss"] == "nan"
    assert write_report([run]).exists()

"""The report is written through a scratch file of its own process: a fixed ``report.html.tmp``
was shared by a run's end-of-training report and an `rlxf report` of the same run (one could
publish the other's half-written page), and replaced any file of that name."""

from __future__ import annotations

from rlxf.metrics.report import write_report


def test_the_report_uses_no_file_of_the_runs_as_its_scratch_file(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (tmp_path / "report.html.tmp").write_text("someone else's")
    out = write_report([tmp_path])
    assert out.read_text().startswith("<!doctype html>")
    assert (tmp_path / "report.html.tmp").read_text() == "someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "report.html", "report.html.tmp"]

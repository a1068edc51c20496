"""`rlxf report --out` never replaces a file a run wrote, however the path to it is spelled."""

from __future__ import annotations

import os

import pytest

from rlxf.cli.main import main
from rlxf.errors import UserInputError
from rlxf.metrics.report import write_report


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """``runs/x``: a run before its first step ended (its metrics.jsonl empty) with an empty file
    in a checkpoint; ``runs/y``: a run with one step; ``link`` -> runs/x; cwd is tmp_path."""
    x, y = tmp_path / "runs" / "x", tmp_path / "runs" / "y"
    (x / "checkpoints" / "step_1").mkdir(parents=True)
    y.mkdir()
    (x / "metrics.jsonl").write_bytes(b"")
    (x / "checkpoints" / "step_1" / "empty.bin").write_bytes(b"")
    (y / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (tmp_path / "link").symlink_to(x)
    (tmp_path / "page.html").symlink_to(x / "metrics.jsonl")
    monkeypatch.chdir(tmp_path)
    return x, y


@pytest.mark.parametrize(
    "out",
    [
        "runs/x/metrics.jsonl",
        "link/metrics.jsonl",
        "runs/y/../x/metrics.jsonl",
        "runs/x/checkpoints/step_1/empty.bin",
        "page.html",
    ],
)
def test_empty_run_files_are_not_replaced(runs, out, capsys):
    x, _ = runs
    assert main(["report", "runs/y", "--out", out]) == 2
    assert "exists and is empty (as a run's metrics.jsonl is" in capsys.readouterr().err
    assert (x / "metrics.jsonl").read_bytes() == b""
    assert (x / "checkpoints" / "step_1" / "empty.bin").read_bytes() == b""
    assert os.path.islink("page.html")


def test_a_run_reporting_into_its_own_empty_metrics_is_refused(runs):
    x, _ = runs
    with pytest.raises(UserInputError, match=r"metrics.jsonl exists and is empty.*--out .*metrics.html"):
        write_report([x], x / "metrics.jsonl")
    with pytest.raises(
        UserInputError, match=r"page.html \(that is .*metrics.jsonl\).*--out page-report.html"
    ):
        write_report([x], "page.html")
    assert (x / "metrics.jsonl").read_bytes() == b""


def test_an_empty_html_file_and_an_earlier_report_are_replaced(runs, tmp_path):
    _, y = runs
    (tmp_path / "new.html").write_bytes(b"")  # made by the user (touch, mktemp --suffix .html) for the report
    assert write_report([y], tmp_path / "new.html").read_text().startswith("<!doctype html>")
    assert write_report([y], y / "report.html") == y / "report.html"
    assert write_report([y], y / "report.html") == y / "report.html"


def test_what_is_not_a_file_is_not_replaced(runs, tmp_path):
    """`--out /dev/null` replaced the device with a file when run as root; a pipe, a directory too."""
    _, y = runs
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "folder").mkdir()
    for out in (tmp_path / "pipe", tmp_path / "folder", tmp_path / "to-pipe.html"):
        if out.name == "to-pipe.html":
            out.symlink_to(tmp_path / "pipe")
        with pytest.raises(UserInputError, match="is not a file"):
            write_report([y], out)
    assert (tmp_path / "pipe").is_fifo() and (tmp_path / "to-pipe.html").is_symlink()


def test_a_link_to_a_report_is_written_through_and_kept(runs, tmp_path):
    _, y = runs
    (tmp_path / "real.html").write_text("<!doctype html><p>old</p>")
    (tmp_path / "alias.html").symlink_to(tmp_path / "real.html")
    write_report([y], tmp_path / "alias.html")
    assert (tmp_path / "alias.html").is_symlink() and "reward/mean" in (tmp_path / "real.html").read_text()

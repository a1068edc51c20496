"""`rlxf report` renders from a synthetic metrics file (and in a real browser when present)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest

from rlxf.cli.main import main
from rlxf.metrics.report import write_report


def _synthetic_run(path, n=30, shift=0.0):
    path.mkdir(parents=True)
    with open(path / "metrics.jsonl", "w") as f:
        for s in range(1, n + 1):
            rec = {"step": s, "reward/mean": 0.2 + 0.02 * s + shift, "accuracy": 0.1 + 0.02 * s,
                   "kl": 0.001 * s, "entropy": 1.5 - 0.02 * s, "response/length_mean": 20 + math.sin(s),
                   "response/length_max": 40, "policy/clipfrac_low": 0.01, "policy/clipfrac_high": 0.02,
                   "time/rollout": 1.0, "time/reward": 0.1, "time/experience": 0.3, "time/train": 0.8,
                   "time/sync": 0.05, "throughput/tokens_per_s": 1000.0 + s}
            if s % 10 == 0:
                rec["eval/accuracy"] = 0.05 * s / 10
            f.write(json.dumps(rec) + "\n")
    return path


def test_report_renders_all_plots(tmp_path):
    run = _synthetic_run(tmp_path / "run-a")
    out = write_report([run])
    page = out.read_text()
    assert out == run / "report.html"
    for title in ("Reward", "Accuracy", "KL to reference", "Entropy", "Response length",
                  "Clip fraction", "Time per phase"):
        assert f'alt="{title}"' in page
    assert page.count("data:image/png;base64,") == 7


def test_report_overlays_runs_via_cli(tmp_path, capsys):
    a = _synthetic_run(tmp_path / "a")
    b = _synthetic_run(tmp_path / "b", shift=0.1)
    out = tmp_path / "cmp.html"
    assert main(["report", str(a), str(b), "--out", str(out)]) == 0
    page = out.read_text()
    assert "rlxf report: a, b" in page


def test_report_of_a_non_run_is_a_usage_error(tmp_path):
    assert main(["report", str(tmp_path)]) == 2


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium not installed")
def test_report_in_headless_chromium(tmp_path):
    """Open the page in a real browser and check the screenshot is not blank."""
    import numpy as np
    from matplotlib.image import imread

    out = write_report([_synthetic_run(tmp_path / "run")])
    shot = tmp_path / "shot.png"
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1300,1500",
         f"--screenshot={shot}", out.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    img = imread(shot)
    assert img.shape[0] >= 1000 and img.shape[1] >= 1200
    # plots make many distinct colours; a blank or broken page has a handful
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 200


def test_time_bar_averages_occasional_phases_over_every_step():
    from rlxf.metrics.report import RunMetrics, _time_plot

    records = [{"step": s, "time/step": 1.0, "time/rollout": 0.6, "time/train": 0.4} for s in range(1, 5)]
    records.append({"step": 4, "time/eval": 2.0})         # one evaluation in four steps
    fig = _time_plot([RunMetrics("r", records)])
    widths = [round(p.get_width(), 6) for p in fig.axes[0].patches]
    assert widths == [0.6, 0.4, 0.5]                     # rollout, train, eval: 2.0 s / 4 steps

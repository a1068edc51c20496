"""`rlxf report` renders from a synthetic metrics file (and in a real browser when present)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    for title in ("Reward", "Accuracy", "KL to reference", "Entropy (of the samples trained on)", "Response length",
                  "Clip fraction", "Time per phase"):
        assert f'alt="{title}"' in page
    assert page.count("data:image/png;base64,") == 7   # plots without data are left out


def test_report_overlays_runs_via_cli(tmp_path, capsys):
    a = _synthetic_run(tmp_path / "a")
    b = _synthetic_run(tmp_path / "b", shift=0.1)
    out = tmp_path / "cmp.html"
    assert main(["report", str(a), str(b), "--out", str(out)]) == 0
    page = out.read_text()
    assert "rlxf report: a, b" in page


def test_report_of_a_non_run_is_a_usage_error(tmp_path):
    assert main(["report", str(tmp_path)]) == 2


def _screenshot(page, tmp_path, name):
    from matplotlib.image import imread

    shot = tmp_path / f"{name}.png"
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", f"--user-data-dir={tmp_path / ('profile-' + name)}", "--window-size=1300,1500",
         f"--screenshot={shot}", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    return imread(shot)


def _colours(img) -> int:
    """How many distinct RGB colours ``img`` (floats in [0, 1]) holds. Each packed into one
    integer: ``np.unique(axis=0)`` on the pixel rows took seconds a screenshot."""
    import numpy as np

    rgb = (img[..., :3] * 255).astype(np.uint8).reshape(-1, 3).astype(np.uint32)
    return len(np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2]))


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium not installed")
def test_report_in_headless_chromium(tmp_path):
    """Open the pages in a real browser; compare the screenshots with each other."""
    import numpy as np

    rl = write_report([_synthetic_run(tmp_path / "run")])
    img = _screenshot(rl, tmp_path, "rl")
    assert img.shape[0] >= 1000 and img.shape[1] >= 1200
    # plots make many distinct colours; a blank or broken page has a handful
    assert _colours(img) > 200
    # the same run renders to the same pixels (the page holds nothing random or dated) ...
    again = write_report([tmp_path / "run"], tmp_path / "again.html")
    assert np.array_equal(_screenshot(again, tmp_path, "again"), img)
    # ... and an SFT run's page is not the RL page with empty panels: it differs, and is not blank
    sft = _screenshot(write_report([_sft_run(tmp_path / "sft")]), tmp_path, "sft")
    assert sft.shape == img.shape and not np.array_equal(sft, img)
    assert _colours(sft) > 200


def test_time_bar_averages_occasional_phases_over_every_step():
    from rlxf.metrics.report import RunMetrics
    from rlxf.metrics.report_plots import time_plot as _time_plot

    records = [{"step": s, "time/step": 1.0, "time/rollout": 0.6, "time/train": 0.4} for s in range(1, 5)]
    records.append({"step": 4, "time/eval": 2.0})         # one evaluation in four steps
    fig = _time_plot([RunMetrics("r", records)])
    widths = [round(p.get_width(), 6) for p in fig.axes[0].patches]
    assert widths == [0.6, 0.4, 0.5]                     # rollout, train, eval: 2.0 s / 4 steps


# ---- issue 17.8: a report a researcher reads ------------------------------------------------

def _sft_run(path, n=40):
    path.mkdir(parents=True)
    with open(path / "metrics.jsonl", "w") as f:
        for s in range(1, n + 1):
            rec = {"step": s, "sft/loss": 8.0 / s, "lr": 1e-3, "grad_norm": 1.0 / s, "time/train": 0.2,
                   "throughput/tokens_per_s": 500.0}
            if s % 10 == 0:
                rec["eval/accuracy"] = s / 100
            f.write(json.dumps(rec) + "\n")
    return path


def _alts(page):
    import re

    return re.findall(r'<img alt="([^"]+)"', page)


def test_sft_report_plots_its_loss_and_nothing_empty(tmp_path):
    page = write_report([_sft_run(tmp_path / "sft")]).read_text()
    assert _alts(page) == ["Loss", "Accuracy", "Gradient norm", "Learning rate", "Time per phase"]
    assert "no data" not in page


def test_kl_to_reference_only_when_there_is_a_reference(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "reward/mean": 0.1, "policy/approx_kl": 0.01}) + "\n" for s in (1, 2, 3)))
    alts = _alts(write_report([run]).read_text())
    assert "KL to reference" not in alts and "Policy change per step (KL old → new, k3)" in alts


def test_logged_training_signals_are_plotted(tmp_path):
    run = tmp_path / "ppo"
    run.mkdir()
    rec = {"grad_norm": 1.0, "lr": 1e-3, "advantage/mean": 0.0, "advantage/abs_mean": 0.5,
           "sampling/kept_frac": 0.75, "critic/loss": 0.3, "critic/grad_norm": 2.0, "critic/value_mean": 0.1,
           "no_signal": 1.0, "skipped": 0.0, "reward/errors": 2.0, "reward/timeouts": 1.0, "reward/crashes": 0.0}
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, **rec}) + "\n" for s in (1, 2)))
    alts = _alts(write_report([run]).read_text())
    for title in ("Gradient norm", "Learning rate", "Advantages", "Kept fraction (dynamic sampling)", "Critic",
                  "Steps without an update", "Reward failures"):
        assert title in alts


def test_headline_step_time_is_the_mean_not_the_last():
    from rlxf.metrics.report import RunMetrics, headline_rows

    # time/step 1, 2, 6 -> mean 3 (the last, 6, was the old headline); reward: last = 0.5
    records = [{"step": s, "time/step": t, "reward/mean": r} for s, t, r in ((1, 1.0, 0.1), (2, 2.0, 0.2), (3, 6.0, 0.5))]
    header, row = headline_rows([RunMetrics("r", records)])
    cells = dict(zip(header, row))
    assert cells["time/step (mean)"] == "3" and cells["reward/mean (last)"] == "0.5" and cells["steps"] == "3"


def test_comparison_does_not_overwrite_a_runs_own_report(tmp_path, capsys):
    a = _synthetic_run(tmp_path / "a")
    b = _synthetic_run(tmp_path / "b", shift=0.1)
    own = write_report([a]).read_text()
    assert main(["report", str(a), str(b)]) == 0
    assert (a / "report.html").read_text() == own
    compare = tmp_path / "compare-a-vs-b.html"
    assert str(compare) in capsys.readouterr().out and "rlxf report: a, b" in compare.read_text()


def test_step_axis_has_integer_ticks_and_integer_metrics_too():
    from rlxf.metrics.report import Plot, RunMetrics
    from rlxf.metrics.report_plots import line_plot

    records = [{"step": s, "response/length_max": float(3 + s % 2), "entropy": 0.5} for s in (1, 2, 3)]
    fig = line_plot(Plot("t", ("response/length_max",), "tokens"), [RunMetrics("r", records)])
    ax = fig.axes[0]
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert all(float(t).is_integer() for t in ax.get_yticks())
    fig = line_plot(Plot("t", ("entropy",), "nats"), [RunMetrics("r", records)])
    assert all(float(t).is_integer() for t in fig.axes[0].get_xticks())


def test_ema_by_hand():
    from rlxf.metrics.report_plots import ema, smoothing_weight

    # w = 0.5, y = 1, 0, 0: m = 0.5, 0.25, 0.125; debiased by 1 - 0.5^i = 0.5, 0.75, 0.875
    assert ema([1.0, 0.0, 0.0], 0.5) == pytest.approx([1.0, 1 / 3, 1 / 7])
    assert ema([1.0, 2.0], 0.0) == [1.0, 2.0]
    assert smoothing_weight(19) == 0.0                 # short runs are drawn as they are
    assert smoothing_weight(100) == pytest.approx(1 - 2 / 6)   # span 100 // 20 = 5


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60), st.floats(0.0, 0.99))
def test_ema_stays_within_the_range_seen_so_far(ys, w):
    from rlxf.metrics.report_plots import ema

    for i, s in enumerate(ema(ys, w)):
        lo, hi = min(ys[: i + 1]), max(ys[: i + 1])
        assert lo - 1e-6 * (1 + abs(lo)) <= s <= hi + 1e-6 * (1 + abs(hi))


def test_long_curves_are_smoothed_over_the_raw_and_eval_sources_are_points():
    from rlxf.metrics.report import RunMetrics, plots_for
    from rlxf.metrics.report_plots import line_plot

    records = [{"step": s, "accuracy": (s % 2) * 1.0} for s in range(1, 101)]
    records[49].update({"eval/accuracy": 0.4, "eval/arith/accuracy": 0.5, "eval/gsm/accuracy": 0.3})
    records[99].update({"eval/accuracy": 0.6, "eval/arith/accuracy": 0.7, "eval/gsm/accuracy": 0.5})
    run = RunMetrics("r", records)
    (acc,) = [p for p in plots_for([run]) if p.title == "Accuracy"]
    assert {"eval/arith/accuracy", "eval/gsm/accuracy"} <= set(acc.keys)
    lines = line_plot(acc, [run]).axes[0].get_lines()
    raw = [ln for ln in lines if ln.get_alpha() == 0.25]
    assert len(raw) == 1 and list(raw[0].get_ydata()) == [(s % 2) * 1.0 for s in range(1, 101)]
    labels = {ln.get_label(): ln for ln in lines}
    assert "accuracy (smoothed)" in labels and max(labels["accuracy (smoothed)"].get_ydata()[10:]) < 0.8
    for src in ("eval/arith/accuracy", "eval/gsm/accuracy"):
        assert labels[src].get_marker() == "o" and list(labels[src].get_xdata()) == [50, 100]


def test_multi_turn_runs_plot_the_reward_of_each_turn():
    from rlxf.metrics.report import RunMetrics, plots_for

    records = [{"step": s, "reward/mean": 0.5, "env/turn_reward/1": 0.1, "env/turn_reward/2": 0.3,
                "env/turn_reward/10": 0.9} for s in range(1, 4)]
    titles = [p.title for p in plots_for([RunMetrics("r", records)])]
    assert titles[:2] == ["Reward", "Reward per turn (mean reward of turn K)"]
    (turns,) = [p for p in plots_for([RunMetrics("r", records)]) if p.title.startswith("Reward per turn")]
    assert turns.keys == ("env/turn_reward/1", "env/turn_reward/2", "env/turn_reward/10")   # by turn, not text
    single_turn = RunMetrics("r", [{"step": 1, "reward/mean": 1.0}])
    assert not any(p.title.startswith("Reward per turn") for p in plots_for([single_turn]))


def test_samples_table_best_worst_random_per_step(tmp_path):
    from rlxf.metrics.report import load_run, sample_rows

    run = _synthetic_run(tmp_path / "s", n=3)
    with open(run / "samples.jsonl", "w") as f:
        for step in (1, 2):
            for i, reward in enumerate((0.5, 1.0, 0.0, 0.25)):
                f.write(json.dumps({"step": step, "prompt": f"p{step}", "response": f"r{step}-{i}",
                                    "reward": reward, "correct": reward == 1.0, "reward_error": None}) + "\n")
        f.write(json.dumps({"step": 2, "prompt": "p", "response": "boom", "reward": -1.0, "correct": False,
                            "reward_error": "ZeroDivisionError"}) + "\n")
    rows = sample_rows(load_run(run))
    assert rows[0] == ["step", "which", "reward", "correct", "prompt", "response"]
    step1 = [r for r in rows[1:] if r[0] == "1"]
    assert [r[1:4] + [r[5]] for r in step1[:2]] == [["best", "1", "True", "r1-1"], ["worst", "0", "False", "r1-2"]]
    assert step1[2][1] == "random" and step1[2][5] in ("r1-0", "r1-3")
    worst2 = [r for r in rows[1:] if r[0] == "2" and r[1] == "worst"][0]
    assert worst2[2] == "-1" and "[reward error: ZeroDivisionError]" in worst2[5]
    page = write_report([run]).read_text()
    assert "Samples: best, worst and a random response" in page and "r1-1" in page
    assert "Time per phase (mean seconds per step)" in page and "rollout" in page


def test_per_source_eval_accuracy():
    from types import SimpleNamespace as NS

    from rlxf.trainer.evaluate import _per_source_accuracy

    def t(uid, correct):
        return NS(prompt=NS(uid=uid), correct=correct)

    trajs = [t("arith:test:0", True), t("arith:test:1", False), t("gsm:test:0", True)]
    assert _per_source_accuracy(trajs, "eval/") == {"eval/arith/accuracy": 0.5, "eval/gsm/accuracy": 1.0,
                                                    "eval/source_mean_accuracy": 0.75}
    assert _per_source_accuracy(trajs[:2], "eval/") == {}   # one source: the overall figure says it

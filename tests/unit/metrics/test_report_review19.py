"""Found by review: report figures drawn twice; DPO and reward-model runs with an empty report;
a comparison's file name past 255 bytes, or inside the run "."; a legend over a mixture's curves;
read errors called write errors; huge JSON integers; misleading "not a run directory" hints; a
TensorBoard directory that could not be made found only after the first step."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import matplotlib
import pytest

from rlxf.metrics.report import Plot, RunMetrics, default_output, headline_rows, write_report
from rlxf.metrics.report_plots import line_plot, png, time_plot
from rlxf.metrics.sinks import read_jsonl

matplotlib.use("Agg")


def _run(path, records):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _alts(page: str) -> list[str]:
    return re.findall(r'<img alt="([^"]*)"', page)


RUN = RunMetrics("r", [{"step": s, "reward/mean": 0.1 * s, "eval/accuracy": 0.5, "time/step": 1.0,
                        "time/rollout": 0.6, "time/train": 0.4} for s in range(1, 30)])


@pytest.mark.parametrize("figure", [lambda: line_plot(Plot("Reward", ("reward/mean", "eval/accuracy"), "r"), [RUN]),
                                    lambda: time_plot([RUN])])   # its legend lies below the axes, outside them
def test_a_report_figure_is_drawn_once_and_is_the_image_a_tight_savefig_gives(figure, monkeypatch):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    fig = figure()
    tight = io.BytesIO()
    fig.savefig(tight, format="png", dpi=100, bbox_inches="tight")
    draws = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (draws.append(self), draw(self, renderer))[1])
    image = base64.b64decode(png(fig))
    plt.close(fig)
    assert len(draws) == 1            # "tight" drew it twice: once to measure, once to save
    assert image == tight.getvalue()  # byte for byte: nothing cut off, nothing moved


# as `rlxf dpo` and `rlxf rm` log them (trainer/pairwise.py): the objective's prefix, the pair metrics
def _pair_records(prefix: str) -> list[dict]:
    names = ("loss", "reward_accuracy", "reward_margin", "logps_chosen", "logps_rejected")
    evaluation = {f"eval/{prefix}/{n}": 0.5 for n in names}
    return [{"step": 0, **evaluation},
            *({"step": s, "grad_norm": 1.0, "lr": 1e-5, "time/train": 0.1, **{f"{prefix}/{n}": 0.1 * s for n in names}}
              for s in (1, 2, 3)),
            {"step": 3, **evaluation}]


@pytest.mark.parametrize("prefix", ["dpo", "rm"])
def test_a_dpo_or_reward_model_run_reports_its_loss_and_pairs_ranked_right(prefix, tmp_path):
    """The report of such a run showed the gradient norm and the learning rate only."""
    alts = _alts(write_report([_run(tmp_path / prefix, _pair_records(prefix))]).read_text())
    for title in ("Loss", "Pairs ranked right (chosen above rejected)", "Reward margin (chosen − rejected)"):
        assert title in alts
    assert ("Log-probs of chosen and rejected (DPO)" in alts) == (prefix == "dpo")
    header, row = headline_rows([RunMetrics(prefix, _pair_records(prefix))])
    cells = dict(zip(header, row))
    assert cells[f"{prefix}/loss (last)"] == "0.3" and cells[f"eval/{prefix}/reward_accuracy (last)"] == "0.5"


def test_the_headline_has_the_pair_columns_only_where_some_run_logged_them():
    """An RL run's headline holds no empty columns of DPO and RM metrics; with a DPO run, each has its own."""
    rl = RunMetrics("rl", [{"step": 1, "reward/mean": 0.25, "time/step": 2.0}])
    assert not [c for c in headline_rows([rl])[0] if "dpo/" in c or "rm/" in c]
    header, *rows = headline_rows([rl, RunMetrics("dpo", _pair_records("dpo"))])
    table = [dict(zip(header, row)) for row in rows]
    assert [(t["reward/mean (last)"], t["dpo/loss (last)"], t["eval/dpo/reward_accuracy (last)"]) for t in table] \
        == [("0.25", "-", "-"), ("-", "0.3", "0.5")]
    assert "rm/loss (last)" not in header and "eval/accuracy (last)" in header   # RL's are always there


@pytest.mark.filterwarnings("ignore:Glyph")  # no CJK font here: the legend draws boxes, the name is kept
def test_a_comparison_of_runs_with_long_non_ascii_names_gets_a_file_name_that_can_be_written(tmp_path):
    """The first name was cut to 150 *characters*: 255 bytes of CJK, past the file-name limit."""
    a, b = (_run(tmp_path / ("実験" * 42 + tail), [{"step": 1, "reward/mean": 0.5}]) for tail in ("", "a"))
    out = default_output([a, b])
    assert out.name.startswith("compare-実験") and out.name.endswith("-vs-1-more.html")
    assert len(out.name.encode()) <= 255
    assert write_report([a, b]) == out and out.is_file()


def test_a_run_file_the_report_cannot_read_is_named_as_read_not_written(tmp_path, capsys):
    """A samples.jsonl that is a directory: "cannot write the report to .../samples.jsonl"."""
    from rlxf.cli.main import main

    run = _run(tmp_path / "run", [{"step": 1, "reward/mean": 0.5}])
    (run / "samples.jsonl").mkdir()
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"cannot read {run / 'samples.jsonl'}: Is a directory" in err and "write" not in err
    assert "move it aside to report without samples" in err
    assert not (run / "report.html").exists()


def test_an_integer_past_the_float_range_is_an_infinity_not_the_end_of_the_report(tmp_path):
    """JSON integers have no limit; float() of one past 1.8e308 raised OverflowError."""
    big = 10**400
    run = _run(tmp_path / "run", [{"step": 1, "reward/mean": big, "kl": -big}, {"step": 2, "reward/mean": 0.5},
                                  {"step": big, "reward/mean": 0.25}])
    (run / "samples.jsonl").write_text(json.dumps({"step": 1, "reward": big, "prompt": "p", "response": "r"}) + "\n")
    metrics = RunMetrics("run", read_jsonl(run / "metrics.jsonl"))
    assert metrics.series("reward/mean")[1] == [0.5, 0.25]
    assert metrics.non_finite("reward/mean") == 1 and metrics.last("kl") == float("-inf")
    assert "Reward" in _alts(write_report([run]).read_text())


@pytest.mark.parametrize("sources", [2, 12])
def test_a_legend_of_many_eval_sources_does_not_cover_their_curves(sources):
    """A mixture of 12 sources: 14 legend entries inside the axes hid most of the accuracy plot."""
    import matplotlib.pyplot as plt

    keys = ("eval/accuracy", "eval/source_mean_accuracy", *(f"eval/s{i}/accuracy" for i in range(sources)))
    run = RunMetrics("r", [{"step": s, **{k: 0.5 for k in keys}} for s in (5, 10)])
    fig = line_plot(Plot("Accuracy", keys, "fraction correct"), [run])
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    plt.close(fig)
    assert len(ax.get_legend().get_texts()) == len(keys)
    assert legend.overlaps(axes) == (len(keys) <= 6)   # a few entries stay inside, as before


def test_a_comparison_started_inside_a_run_goes_beside_it_not_into_it(tmp_path, monkeypatch):
    """`rlxf report . ../b` from inside run a: Path(".").parent is ".", so it went into a."""
    a, b = (_run(tmp_path / n, [{"step": 1, "reward/mean": 0.5}]) for n in ("a", "b"))
    monkeypatch.chdir(a)
    out = write_report([Path("."), Path("../b")])
    assert out.resolve() == tmp_path / "compare-a-vs-b.html" and not list(a.glob("compare-*"))


def test_the_run_directory_a_wrong_path_hints_at_is_above_it(tmp_path, monkeypatch, capsys):
    """From inside run a, `rlxf report ..` hinted "did you mean its run directory .?": "." is below ".."."""
    from rlxf.cli.main import main

    a = _run(tmp_path / "runs" / "a", [{"step": 1, "reward/mean": 0.5}])
    (a / "checkpoints" / "step_2").mkdir(parents=True)
    monkeypatch.chdir(a)
    assert main(["report", ".."]) == 2
    assert "did you mean" not in capsys.readouterr().err
    monkeypatch.chdir(a / "checkpoints" / "step_2")
    for wrong in (".", "../step_2"):
        assert main(["report", wrong]) == 2
        assert f"did you mean its run directory {a}?" in capsys.readouterr().err


def test_a_run_without_metrics_yet_or_a_folder_of_runs_is_not_called_no_run(tmp_path, monkeypatch, capsys):
    """A run still loading its model, `rlxf label`'s run and `runs/` itself were each "not a run
    directory; pass a run directory such as runs/<name>"."""
    from rlxf.cli.main import main

    runs = tmp_path / "runs"
    for name, command in (("starting", "train"), ("pairs", "label")):
        (runs / name).mkdir(parents=True)
        (runs / name / "run.json").write_text(json.dumps({"command": command}))
    _run(runs / "a", [{"step": 1, "reward/mean": 0.5}])
    monkeypatch.chdir(tmp_path)
    said = {}
    for arg in ("runs/starting", "runs/pairs", "runs"):
        assert main(["report", arg]) == 2
        said[arg] = capsys.readouterr().err
    assert "runs/starting is a run directory of `rlxf train` with no metrics.jsonl yet" in said["runs/starting"]
    assert "runs/pairs is a run of `rlxf label`, which writes preference pairs" in said["runs/pairs"]
    assert "it holds the runs runs/a: pass one, or several to compare them" in said["runs"]
    assert not [m for m in said.values() if "such as runs/<name>" in m]


def test_a_tensorboard_dir_that_cannot_be_made_stops_the_run_at_its_start(tmp_path):
    """The writer opened at the first step: a run with a file named ``tensorboard`` in its directory
    started, warned at step 1, and had no TensorBoard for its whole length."""
    pytest.importorskip("tensorboard")
    from rlxf.metrics.sinks import SinkStartError, build_sinks

    (tmp_path / "tensorboard").write_text("not a directory")
    with pytest.raises(SinkStartError, match="'tensorboard', and it could not start .*File exists.*can be written"):
        build_sinks(["tensorboard"], tmp_path, project="p", run_name="r", config={})

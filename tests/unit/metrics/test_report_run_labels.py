"""Run names the plots' fonts cannot draw (CJK with only DejaVu installed) are numbered, with a key on the page."""

from __future__ import annotations

import json

from matplotlib import rc_context

from rlxf.metrics.report import RunMetrics, write_report
from rlxf.metrics.report_plots import Plot, drawable_text, line_plot, run_labels, time_plot

# the fonts matplotlib ships, so these hold wherever it is installed: DejaVu Sans has no CJK glyphs
DEJAVU = {"font.family": ["DejaVu Sans"]}


def test_a_name_is_drawable_when_the_font_family_or_a_fallback_has_its_glyphs():
    with rc_context({"font.family": ["cmr10"]}):  # TeX's Computer Modern: no é
        assert drawable_text("cafe") and not drawable_text("café")
    with rc_context({"font.family": ["cmr10", "DejaVu Sans"]}):  # DejaVu Sans is its fallback
        assert drawable_text("café")
    with rc_context(DEJAVU):
        assert not drawable_text("実験")
        assert run_labels(["実験", "base", "实验二"]) == ["run 1", "base", "run 3"]


def test_a_number_never_repeats_another_runs_name():
    # a run really named "run 2" beside an undrawable second run drew two legend entries alike
    with rc_context(DEJAVU):
        assert run_labels(["run 2", "実験"]) == ["run 2", "run 2'"]
        assert run_labels(["実験", "run 1", "run 1'"]) == ["run 1''", "run 1", "run 1'"]


def test_plots_number_the_runs_whose_names_the_fonts_cannot_draw():
    runs = [RunMetrics(name, [{"step": 1, "reward/mean": 0.5}]) for name in ("実験", "base")]
    with rc_context(DEJAVU):
        legend = line_plot(Plot("Reward", ("reward/mean",), "mean reward"), runs).axes[0].get_legend()
        ticks = time_plot(runs).axes[0].get_yticklabels()
    assert [t.get_text() for t in legend.get_texts()] == ["run 1: reward/mean", "base: reward/mean"]
    assert [t.get_text() for t in ticks] == ["run 1", "base"]


def test_the_page_says_which_run_each_number_is(tmp_path):
    for name in ("実験", "base"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    with rc_context(DEJAVU):
        page = write_report([tmp_path / "実験", tmp_path / "base"], tmp_path / "cmp.html").read_text()
        plain = write_report([tmp_path / "base"]).read_text()
    assert "<p>The plots number the runs whose names their fonts cannot draw: run 1 is 実験.</p>" in page
    assert "number the runs" not in plain

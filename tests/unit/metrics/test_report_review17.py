"""report.html's plots tell every curve apart: a plot with more keys than line styles (five
episode ends, an accuracy plot with its eval sources) drew its fifth key exactly as its first."""

from __future__ import annotations

import matplotlib
import pytest

from rlxf.metrics.report import RunMetrics, plots_for
from rlxf.metrics.report_plots import key_style, line_plot

matplotlib.use("Agg")

ENDS = ("terminated", "truncated", "max_turns", "max_total_tokens", "error")


def _looks(fig) -> dict[str, tuple]:
    """Each legend entry's colour, line style and marker."""
    return {ln.get_label(): (ln.get_color(), ln.get_linestyle(), ln.get_marker())
            for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")}


def _plot(title: str, runs: list[RunMetrics]):
    (plot,) = [p for p in plots_for(runs) if p.title.startswith(title)]
    return line_plot(plot, runs)


def test_key_styles_by_hand():
    assert [key_style(i, points=False) for i in (0, 3, 4, 7, 8)] == [
        ("-", None), ("-.", None), ("-", "o"), ("-.", "o"), ("-", "s")]
    assert [key_style(i, points=True) for i in (0, 1, 4)] == [("-", "o"), ("--", "o"), ("-", "s")]
    assert len({key_style(i, False) for i in range(36)}) == 36 and len({key_style(i, True) for i in range(32)}) == 32


@pytest.mark.parametrize("n_runs", [1, 2])
def test_every_curve_of_a_plot_is_drawn_its_own_way(n_runs):
    records = [{"step": s, "accuracy": 0.1 * s, **{f"env/end/{e}": 0.2 for e in ENDS}} for s in range(1, 5)]
    for r in records[1::2]:
        r.update({"eval/accuracy": 0.5, "eval/source_mean_accuracy": 0.5, "eval/a/accuracy": 0.4,
                  "eval/b/accuracy": 0.6})
    runs = [RunMetrics(f"r{i}", records) for i in range(n_runs)]
    for title, count in (("Accuracy", 5), ("How episodes ended", 5)):
        looks = _looks(_plot(title, runs))
        assert len(looks) == count * n_runs
        assert len(set(looks.values())) == len(looks), looks   # eval/b/accuracy drew as eval/source_mean_accuracy


def test_a_key_is_drawn_alike_in_every_run_of_a_comparison():
    """Styles go to the keys some run logged: a run without the first key does not shift the others."""
    with_acc = RunMetrics("a", [{"step": 1, "accuracy": 0.1, "eval/accuracy": 0.2}])
    without = RunMetrics("b", [{"step": 1, "eval/accuracy": 0.3}])
    looks = _looks(_plot("Accuracy", [with_acc, without]))
    assert looks["a: eval/accuracy"][1:] == looks["b: eval/accuracy"][1:] == ("--", "o")
    assert looks["a: eval/accuracy"][0] != looks["b: eval/accuracy"][0]      # a colour per run


def test_out_never_replaces_a_file_that_is_not_a_report(tmp_path):
    """``--out runs/x/metrics.jsonl`` wrote the page over the run's metrics: the run was lost."""
    from rlxf.cli.main import main
    from rlxf.errors import UserInputError
    from rlxf.metrics.report import write_report

    run = tmp_path / "run"
    run.mkdir()
    metrics = b'{"step": 1, "reward/mean": 0.5}\n'
    (run / "metrics.jsonl").write_bytes(metrics)
    (run / "config.yaml").write_text("run: {name: run}\n")
    assert main(["report", str(run), "--out", str(run / "metrics.jsonl")]) == 2
    assert (run / "metrics.jsonl").read_bytes() == metrics
    with pytest.raises(UserInputError, match=r"config.yaml exists and is not an HTML page.*--out .*config.html"):
        write_report([run], run / "config.yaml")
    assert (run / "config.yaml").read_text() == "run: {name: run}\n"
    page = write_report([run], tmp_path / "r.html")
    assert write_report([run], page) == page            # a report is replaced by the next one

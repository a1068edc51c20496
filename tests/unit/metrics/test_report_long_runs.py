"""The report of a long run: each metric read once, curves drawn from each pixel column's extremes."""

from __future__ import annotations

from rlxf.metrics.report import RunMetrics, headline_rows, phase_rows, plots_for
from rlxf.metrics.report_plots import DRAW_BUCKETS, Plot, drawn_points, line_plot, time_plot


def test_a_long_curve_is_drawn_from_the_lowest_and_highest_point_of_each_bucket():
    xs = list(range(10, 19))
    ys = [0.0, 5.0, -1.0, 2.0, 3.0, 9.0, 1.0, 1.0, 4.0]
    # 9 points > 4 * 2 buckets: [0, 4) keeps its max 5.0 (index 1) and min -1.0 (index 2); [4, 9) its
    # max 9.0 (index 5) and first min 1.0 (index 6); the first and last points are kept too
    assert drawn_points(xs, ys, buckets=2) == ([10, 11, 12, 15, 16, 18], [0.0, 5.0, -1.0, 9.0, 1.0, 4.0])


def test_a_short_curve_is_drawn_whole():
    xs, ys = [1, 2, 3, 4, 5, 6, 7, 8], [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    assert drawn_points(xs, ys, buckets=2) == (xs, ys)


def _long_run(n: int = 20_000) -> RunMetrics:
    records = [
        {"step": s, "reward/mean": (s % 7) / 10, "time/step": 1.0, "time/train": 0.5} for s in range(1, n + 1)
    ]
    records[n * 5 // 8]["reward/mean"] = 5.0  # one spike (at step 12501 of 20000)
    records[-1]["reward/mean"] = 0.25
    return RunMetrics("long", records)


def test_a_20000_step_curve_keeps_its_spike_its_ends_and_its_exact_last_value():
    run = _long_run()
    ax = line_plot(Plot("Reward", ("reward/mean",), "mean reward"), [run]).axes[0]
    raw, smooth = ax.get_lines()
    for line in (raw, smooth):
        assert len(line.get_xdata()) <= 2 * DRAW_BUCKETS + 2
        assert (line.get_xdata()[0], line.get_xdata()[-1]) == (1, 20_000)
    assert max(raw.get_ydata()) == 5.0 and 12_501 in raw.get_xdata()
    assert headline_rows([run])[1][:3] == ["long", "20000", "0.25"]


class CountedReads(list):
    """Records that count how often they are read through."""

    reads = 0

    def __iter__(self):
        self.reads += 1
        return super().__iter__()


def test_the_report_reads_each_metric_of_the_records_once():
    run = _long_run(50)
    run.records = CountedReads(run.records)
    for plot in plots_for([run]):
        line_plot(plot, [run])
    time_plot([run])
    headline_rows([run])
    phase_rows([run])
    # once for the steps, once for the keys, once for each key logged (reward/mean, time/step, time/train)
    assert run.records.reads <= 2 + len(run.key_set - {"step"})

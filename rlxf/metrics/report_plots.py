"""The figures of ``rlxf report``: smoothed curves over the raw ones, eval points, phase times.

Plotting only: what to plot and the page around it live in ``rlxf.metrics.report``.
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

PHASES = ("rollout", "reward", "experience", "train", "sync", "eval", "checkpoint")
STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LEGEND_INSIDE_MAX = 6   # entries a legend may have inside the axes; more go to the right of them
DRAW_BUCKETS = 1000     # a long curve is drawn as the extremes of this many runs of its points (drawn_points)


class Series(Protocol):
    name: str

    def series(self, key: str) -> tuple[list[int], list[float]]: ...


@dataclass(frozen=True)
class Plot:
    title: str
    keys: tuple[str, ...]   # metric names drawn on this plot (solid, dashed, dotted, ...)
    ylabel: str


def smoothing_weight(n: int) -> float:
    """EMA weight for a curve of ``n`` points: a span of about n/20 points (none under 20)."""
    span = max(1, n // 20)
    return 1.0 - 2.0 / (span + 1)


def ema(ys: Sequence[float], weight: float) -> list[float]:
    """Debiased exponential moving average (TensorBoard's smoothing).

        m_i = w m_{i-1} + (1 - w) y_i,  m_0 = 0;   s_i = m_i / (1 - w^i)

    The division removes the pull towards 0 of the first points; ``weight`` 0 returns ``ys``.
    """
    out, m = [], 0.0
    for i, y in enumerate(ys, start=1):
        m = weight * m + (1.0 - weight) * y
        out.append(m / (1.0 - weight**i) if weight > 0 else y)
    return out


def drawn_points(xs: Sequence[int], ys: Sequence[float], buckets: int = DRAW_BUCKETS) -> tuple[Sequence, Sequence]:
    """The points of a curve that are drawn: all of them up to ``4 * buckets``; past that the first,
    the last, and the lowest and highest of each of ``buckets`` runs of consecutive points, in
    order. On a plot up to ``buckets`` pixels wide a bucket spans under a pixel column, and its
    extremes are what that column shows (a spike stays), so the line looks the same, and the
    curves of a 20,000-step run draw in a fraction of the time. Drawing only: the tables and the
    smoothing use every point."""
    n = len(ys)
    if n <= 4 * buckets:
        return xs, ys
    keep = {0, n - 1}
    for b in range(buckets):
        lo = b * n // buckets
        part = ys[lo:(b + 1) * n // buckets]
        keep |= {lo + part.index(min(part)), lo + part.index(max(part))}
    kept = sorted(keep)
    return [xs[i] for i in kept], [ys[i] for i in kept]


def plain_text(text: str) -> str:
    """``text`` as matplotlib draws it literally: a run or source name is the user's, and
    matplotlib reads a pair of ``$`` as math (``a$b_{$`` stops the report with a parse error) and
    drops legend labels that start with ``_`` (a run named ``_baseline`` would lose its entry)."""
    text = text.replace("$", r"\$")
    return "\N{ZERO WIDTH SPACE}" + text if text.startswith("_") else text


def run_labels(names: Sequence[str]) -> list[str]:
    """The runs' names as the plots draw them: each name, or ``run N`` (its place among the runs,
    from 1) where the fonts have no glyph for some character of it. With only DejaVu fonts
    installed, a CJK run name was a row of boxes, every run's alike; the page around the plots
    says which run each number is (``rlxf.metrics.report``). A number never repeats another
    run's name: beside a run named "run 2", the second run's number is "run 2'"."""
    drawn = [drawable_text(name) for name in names]
    taken = {name for name, ok in zip(names, drawn, strict=True) if ok}
    labels = []
    for i, (name, ok) in enumerate(zip(names, drawn, strict=True), start=1):
        label = name if ok else f"run {i}"
        while not ok and label in taken:
            label += "'"
        taken.add(label)
        labels.append(label)
    return labels


def drawable_text(text: str) -> bool:
    """Whether the fonts matplotlib draws text with have a glyph for every character of ``text``:
    the families of ``rcParams["font.family"]`` that are installed, the first one's missing glyphs
    taken from the next (matplotlib's fallback), else its default font. A CJK font that is
    installed but not listed there is not used."""
    from matplotlib import font_manager, rcParams

    paths = []
    for family in rcParams["font.family"]:
        try:
            paths.append(font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False))
        except ValueError:  # not installed
            continue
    missing = {ord(c) for c in text}
    for path in paths or [font_manager.findfont(font_manager.FontProperties())]:
        missing -= _glyphs(path)
    return not missing


@functools.lru_cache(maxsize=16)
def _glyphs(path: str) -> frozenset[int]:
    """The code points font file ``path`` has glyphs for: read once (a few ms each, and every plot
    of a report asks for its run names)."""
    from matplotlib import font_manager

    return frozenset(font_manager.get_font(path).get_charmap())


def key_style(index: int, points: bool) -> tuple[str, str | None]:
    """Line style and marker of the ``index``-th key a plot draws: the four line styles, then
    again with a marker each (a plot of five episode ends, or an accuracy plot with its sources,
    drew its fifth key exactly as its first). Eval points always have a marker."""
    style, lap = STYLES[index % len(STYLES)], index // len(STYLES)
    if points:
        return style, MARKERS[lap % len(MARKERS)]
    return style, None if lap == 0 else MARKERS[(lap - 1) % len(MARKERS)]


def png(fig, dpi: int = 100) -> str:
    """``fig`` as a base64 PNG, cropped to what it draws (``bbox_inches="tight"``'s image, byte
    for byte). The box is measured here, without drawing: given "tight", savefig draws the whole
    figure once only to measure it, then again to save it (over a tenth of a report's time)."""
    import matplotlib

    fig.set_dpi(dpi)  # measured at the dpi it is saved at, as savefig does
    box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(matplotlib.rcParams["savefig.pad_inches"])
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches=box)
    return base64.b64encode(buf.getvalue()).decode()


def _integer_axes(ax, ys_all: list[float]) -> None:
    """Steps are whole numbers, and so are some metrics (token counts): no 2.5 ticks on them."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ys_all and all(float(y).is_integer() for y in ys_all):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def line_plot(plot: Plot, runs: Sequence[Series]):
    """One axes: each run a colour, each key a line style. Training curves are drawn raw (faint)
    with their smoothed curve on top; eval keys (measured every few steps) as points."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ys_all: list[float] = []

    def bad(run: Series, key: str) -> int:
        return run.non_finite(key) if hasattr(run, "non_finite") else 0

    # styles go to the keys some run logged, in the plot's order, so every run draws a key alike
    logged = [k for k in plot.keys if any(run.series(k)[0] or bad(run, k) for run in runs)]
    names = run_labels([run.name for run in runs])
    for ci, run in enumerate(runs):
        for si, key in enumerate(logged):
            # one run: a colour per key; several: a colour per run, and the key's style tells them apart
            color = f"C{(si if len(runs) == 1 else ci) % 10}"
            xs, ys = run.series(key)
            label = plain_text(key if len(runs) == 1 else f"{names[ci]}: {key}")
            points = key.startswith("eval/")
            style, marker = key_style(si, points)
            if nonfinite := bad(run, key):  # a NaN loss is news: say it on the plot, where the curve stops or never starts
                label += f" ({nonfinite} NaN/inf not drawn)"
                if not xs:
                    ax.plot([], [], style, color=color, label=label, marker=marker)
            if not xs:
                continue
            ys_all += ys
            if points:
                ax.plot(*drawn_points(xs, ys), style, color=color, label=label, marker=marker, markersize=4,
                        linewidth=1)
                continue
            weight = smoothing_weight(len(ys))
            if weight > 0:
                ax.plot(*drawn_points(xs, ys), style, color=color, alpha=0.25, linewidth=1)
                label += " (smoothed)"
            smooth = drawn_points(xs, ema(ys, weight))
            ax.plot(*smooth, style, color=color, label=label, linewidth=1.6, marker=marker,
                    markersize=4, markevery=max(1, len(smooth[0]) // 12))
    ax.set_title(plot.title)
    ax.set_xlabel("step")
    ax.set_ylabel(plot.ylabel)
    ax.grid(alpha=0.3)
    _integer_axes(ax, ys_all)
    if not ys_all:
        ax.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=ax.transAxes, color="gray")
    entries = len(ax.get_legend_handles_labels()[1])
    if entries > LEGEND_INSIDE_MAX:  # a mixture's eval sources: inside, the legend hid their curves
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    elif entries:
        ax.legend(fontsize=7)
    return fig


def phase_means(run: Series) -> dict[str, float]:
    """Mean seconds per step of each phase. Phases that run only on some steps (eval,
    checkpoint) are averaged over every step too, so each is its share of a step's time."""
    steps = len(run.series("time/step")[1])
    means = {}
    for phase in PHASES:
        _, ys = run.series(f"time/{phase}")
        if ys:
            means[phase] = sum(ys) / max(steps, len(ys))
    return means


def time_plot(runs: Sequence[Series]):
    """Mean seconds per step in each phase, one stacked bar per run."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 0.6 + 0.5 * max(2, len(runs))))
    drawn = False
    for ri, run in enumerate(runs):
        left = 0.0
        for phase, mean in phase_means(run).items():
            ax.barh(ri, mean, left=left, color=f"C{PHASES.index(phase)}", label=phase)
            left += mean
            drawn = True
    ax.set_yticks(range(len(runs)), [plain_text(name) for name in run_labels([r.name for r in runs])])
    ax.set_xlabel("seconds per step (mean)")
    ax.set_title("Time per phase")
    if drawn:
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.legend(uniq.values(), uniq.keys(), fontsize=7, ncol=len(uniq), loc="upper center",
                  bbox_to_anchor=(0.5, -0.35), frameon=False)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
    return fig

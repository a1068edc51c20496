"""``rlxf report``: an HTML page of PNG plots from one or more runs' metrics.jsonl.

Several runs are overlaid on the same axes for comparison. The page is one self-contained
file (images inlined), so it can be mailed or attached to an issue as is.
"""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlxf.metrics.sinks import read_jsonl

PHASES = ("rollout", "reward", "experience", "train", "sync", "eval", "checkpoint")


@dataclass(frozen=True)
class Plot:
    title: str
    keys: tuple[str, ...]   # metric names drawn on this plot (solid, dashed, dotted, ...)
    ylabel: str


PLOTS = (
    Plot("Reward", ("reward/mean",), "mean reward"),
    Plot("Accuracy", ("accuracy", "eval/accuracy", "eval/pass@k"), "fraction correct"),
    Plot("KL to reference", ("kl", "policy/approx_kl"), "KL (nats/token)"),
    Plot("Entropy", ("entropy",), "nats/token"),
    Plot("Response length", ("response/length_mean", "response/length_max"), "tokens"),
    Plot("Clip fraction", ("policy/clipfrac_low", "policy/clipfrac_high"), "fraction of tokens"),
)
STYLES = ("-", "--", ":", "-.")


@dataclass
class RunMetrics:
    name: str
    records: list[dict[str, Any]]

    def series(self, key: str) -> tuple[list[int], list[float]]:
        xs, ys = [], []
        for r in self.records:
            v = r.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                xs.append(int(r.get("step", len(xs))))
                ys.append(float(v))
        return xs, ys


def load_run(run_dir: Path) -> RunMetrics:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl: is it a run directory?")
    return RunMetrics(run_dir.name, read_jsonl(path))


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _line_plot(plot: Plot, runs: list[RunMetrics]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn = 0
    for ci, run in enumerate(runs):
        color = f"C{ci % 10}"
        for si, key in enumerate(plot.keys):
            xs, ys = run.series(key)
            if not xs:
                continue
            label = key if len(runs) == 1 else f"{run.name}: {key}"
            marker = "o" if key.startswith("eval/") else None
            ax.plot(xs, ys, STYLES[si % len(STYLES)], color=color, label=label, marker=marker, markersize=4)
            drawn += 1
    ax.set_title(plot.title)
    ax.set_xlabel("step")
    ax.set_ylabel(plot.ylabel)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
    return fig


def _time_plot(runs: list[RunMetrics]):
    """Mean seconds per training step in each phase, one stacked bar per run.

    Phases that run only on some steps (eval, checkpoint) are averaged over every step too, so
    each part is that phase's share of the run's time per step.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 0.6 + 0.5 * max(2, len(runs))))
    drawn = False
    for ri, run in enumerate(runs):
        left = 0.0
        steps = len(run.series("time/step")[1])
        for pi, phase in enumerate(PHASES):
            _, ys = run.series(f"time/{phase}")
            if not ys:
                continue
            mean = sum(ys) / max(steps, len(ys))
            ax.barh(ri, mean, left=left, color=f"C{pi}", label=phase if ri == 0 or not drawn else None)
            left += mean
            drawn = True
    ax.set_yticks(range(len(runs)), [r.name for r in runs])
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


def _summary_rows(runs: list[RunMetrics]) -> list[list[str]]:
    keys = ("reward/mean", "accuracy", "eval/accuracy", "kl", "entropy", "response/length_mean",
            "throughput/tokens_per_s", "time/step")
    rows = [["run", "steps", *keys]]
    for run in runs:
        row = [run.name, str(max((int(r.get("step", 0)) for r in run.records), default=0))]
        for key in keys:
            _, ys = run.series(key)
            row.append(f"{ys[-1]:.4g}" if ys else "-")
        rows.append(row)
    return rows


def write_report(run_dirs: list[Path], out: Path | None = None) -> Path:
    """Render the plots of ``run_dirs`` into ``out`` (default: first run's report.html)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [load_run(Path(d)) for d in run_dirs]
    out = Path(out) if out else Path(run_dirs[0]) / "report.html"
    images = []
    for plot in PLOTS:
        fig = _line_plot(plot, runs)
        images.append((plot.title, _png(fig)))
        plt.close(fig)
    fig = _time_plot(runs)
    images.append(("Time per phase", _png(fig)))
    plt.close(fig)

    rows = _summary_rows(runs)
    table = "<table>" + "".join(
        "<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{html.escape(c)}</{'th' if i == 0 else 'td'}>" for c in row) + "</tr>"
        for i, row in enumerate(rows)
    ) + "</table>"
    figures = "\n".join(
        f'<figure><img alt="{html.escape(t)}" src="data:image/png;base64,{b64}"></figure>'
        for t, b64 in images
    )
    title = "rlxf report: " + ", ".join(r.name for r in runs)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 16px; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th {{ background: #f3f3f3; }}
.grid {{ display: flex; flex-wrap: wrap; gap: 12px; }}
figure {{ margin: 0; }}
</style></head>
<body><h1>{html.escape(title)}</h1>
<p>Last value of each headline metric:</p>
{table}
<div class="grid">
{figures}
</div></body></html>
"""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(page)
    tmp.replace(out)
    return out

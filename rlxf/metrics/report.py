"""``rlxf report``: one HTML page of a run (or several, overlaid) that a researcher reads.

What it shows, from ``metrics.jsonl`` and ``samples.jsonl``: a headline table (last values,
and the *mean* step time and throughput); every logged curve (reward, the loss of SFT, RL, DPO or
a reward model, accuracy with each eval source as points, the pairs a DPO or reward model ranks
right and its reward margin, KL to the reference, the policy's change per step,
entropy, steps without an update, reward failures, lengths, clipping, grad norm, learning
rate, advantages, the kept fraction of dynamic
sampling, the critic, the off-policy weights, async staleness, idle time and buffer), smoothed
with the raw curve behind; the time per phase; and a samples table: the best, the worst and a
random response of a few steps, with their rewards. Plots
whose metrics no run logged are left out (an SFT run has no clip fraction). The page is one
self-contained file (images inlined), so it can be mailed or attached to an issue as is.
"""

from __future__ import annotations

import html
import math
import random
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from rlxf.errors import UserInputError
from rlxf.metrics.report_plots import PHASES, Plot, line_plot, phase_means, png, run_labels, time_plot
from rlxf.metrics.sinks import read_jsonl
from rlxf.run_dir import write_atomically

__all__ = ["PLOTS", "PHASES", "Plot", "RunMetrics", "default_output", "load_run", "run_names", "write_report"]

# the pair metrics of `rlxf dpo` and `rlxf rm` (``<prefix>/<name>``, held out: ``eval/<prefix>/<name>``)
PAIR_KEYS = {name: (f"dpo/{name}", f"rm/{name}", f"eval/dpo/{name}", f"eval/rm/{name}")
             for name in ("reward_accuracy", "reward_margin")}
PLOTS = (
    Plot("Reward", ("reward/mean",), "mean reward"),
    Plot("Loss", ("sft/loss", "policy/loss", "dpo/loss", "rm/loss", "eval/dpo/loss", "eval/rm/loss"), "loss"),
    Plot("Pairs ranked right (chosen above rejected)", PAIR_KEYS["reward_accuracy"],
         "fraction of pairs (a tie counts 1/2)"),
    Plot("Reward margin (chosen − rejected)", PAIR_KEYS["reward_margin"], "reward (DPO: β log-ratio)"),
    Plot("Log-probs of chosen and rejected (DPO)", ("dpo/logps_chosen", "dpo/logps_rejected",
                                                    "eval/dpo/logps_chosen", "eval/dpo/logps_rejected"),
         "log π(response | prompt)"),
    Plot("Accuracy", ("accuracy", "eval/accuracy", "eval/source_mean_accuracy", "eval/pass@k", "eval/mean@k"),
         "fraction correct"),
    Plot("KL to reference", ("kl",), "KL (nats/token)"),
    Plot("Policy change per step (KL old → new, k3)", ("policy/approx_kl",), "KL (nats/token)"),
    Plot("Entropy (of the samples trained on)", ("entropy",), "nats/token"),
    Plot("Signal", ("groups/zero_variance_frac", "groups/identical_frac", "rows_run_frac", "response/same_frac"),
         "fraction (groups all agreeing / groups of one wrong response / samples run / samples that are one response)"),
    Plot("Steps without an update", ("no_signal", "skipped"),
         "1 = the step (no sample had an advantage / a non-finite loss or gradient was skipped)"),
    Plot("Reward failures", ("reward/errors", "reward/crashes", "reward/timeouts"),
         "per step: samples with a failed verifier / verifier timeouts / worker crashes"),
    Plot("Response length", ("response/length_mean", "response/length_max"), "tokens"),
    Plot("Clip fraction", ("policy/clipfrac_low", "policy/clipfrac_high"), "fraction of tokens"),
    Plot("Gradient norm", ("grad_norm", "critic/grad_norm"), "L2 norm (before clipping)"),
    Plot("Learning rate", ("lr",), "lr"),
    Plot("Advantages", ("advantage/mean", "advantage/abs_mean"), "advantage"),
    Plot("Kept fraction (dynamic sampling)", ("sampling/kept_frac",), "fraction of samples"),
    Plot("Truncated responses", ("response/truncated_frac", "response/truncated_masked_frac"),
         "fraction of samples (cut off at max_new_tokens / of those, masked: algorithm.mask_truncated)"),
    Plot("How episodes ended (env)", tuple(f"env/end/{end}" for end in
                                          ("terminated", "truncated", "max_turns", "max_total_tokens", "error")),
         "fraction of episodes"),
    Plot("Critic", ("critic/loss", "critic/value_mean", "critic/vf_clipfrac"), "value"),
    Plot("Engine vs trainer log-prob gap", ("rollout/logprob_gap_mean", "rollout/logprob_gap_max",
                                             "rollout/stale_logprob_gap_mean"), "nats"),
    Plot("Off-policy weights (ρ = π_old / π_rollout)",
         ("off_policy/weight_mean", "off_policy/weight_max", "off_policy/ratio_max", "off_policy/ratio_min"), "weight"),
    Plot("Off-policy tokens truncated / masked", ("off_policy/truncated_frac", "off_policy/masked_frac"),
         "fraction of tokens"),
    Plot("Staleness (rollout.mode=async)", ("async/staleness_mean", "async/staleness_max"),
         "versions behind the trainer"),
    Plot("Idle time (rollout.mode=async)", ("async/trainer_idle_frac", "async/engine_idle_frac"),
         "fraction of the step"),
    Plot("Buffer and drops (rollout.mode=async)", ("async/buffer_fill", "async/dropped_stale", "async/partial_frac"),
         "fill fraction / groups / fraction of samples"),
)
EVAL_SOURCE = re.compile(r"^eval/(.+)/accuracy$")
TURN_REWARD = re.compile(r"^env/turn_reward/(\d+)$")
HEADLINE_LAST = ("reward/mean", "accuracy", "eval/accuracy", "sft/loss", "dpo/loss", "rm/loss",
                 "eval/dpo/reward_accuracy", "eval/rm/reward_accuracy", "kl", "entropy", "response/length_mean")
HEADLINE_MEAN = ("time/step", "throughput/tokens_per_s")
PAIR_HEADLINE = {"dpo/loss", "rm/loss", "eval/dpo/reward_accuracy", "eval/rm/reward_accuracy"}  # where logged
SAMPLE_STEPS = 6          # steps shown in the samples table, evenly spread, first and last included


def metric_number(value: Any) -> float | None:
    """A logged value as a float, or None when it is no number (a list, a label, a bool).

    metrics.jsonl holds NaN and inf as the strings "nan", "inf" and "-inf" (JSON has no such
    numbers, ``sinks.encode_line``): they are read back as the floats they stand for, so a loss
    that went NaN stays visible instead of disappearing from the report. A JSON integer past the
    float range (a file of another tool) is the infinity of its sign, not an OverflowError that
    stopped the whole report."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str) and value.strip().lower() in NON_FINITE_TEXT:
        return float(value)
    return None


NON_FINITE_TEXT = ("nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity")


def drawable(value: float) -> bool:
    """Finite, and small enough for an axis: matplotlib's margins and ticks overflow on a range
    near the float limit (a diverged loss of -1e308 .. 1e308 stopped the whole report)."""
    return math.isfinite(value) and abs(value) <= 1e300


def record_step(record: dict[str, Any]) -> int | None:
    """A record's ``step`` as a whole number; None when missing or not a finite number (a file
    written by hand or another tool), so one odd record cannot stop the whole report."""
    step = metric_number(record.get("step"))
    return int(step) if step is not None and math.isfinite(step) else None


class Column(NamedTuple):
    """What the report draws and says of one metric of a run."""

    xs: list[int]       # the steps of the drawable values
    ys: list[float]     # the drawable values (``drawable``)
    non_finite: int     # how many values are NaN or infinite, or as good as infinite: not drawn, but said
    last: float | None  # the last logged value, NaN and inf included


@dataclass
class RunMetrics:
    name: str
    records: list[dict[str, Any]]
    samples: list[dict[str, Any]] | None = None
    # each key's column, read from the records once: a report asks for a key several times (its
    # plot, the legend, the headline), and reading every record each time took most of the report
    # of a 20,000-step run
    _columns: dict[str, Column] = field(default_factory=dict, init=False, repr=False, compare=False)

    @cached_property
    def steps(self) -> list[int | None]:
        """Each record's ``record_step``."""
        return [record_step(r) for r in self.records]

    def column(self, key: str) -> Column:
        """``key``'s values, read from the records at the first ask."""
        if key not in self._columns:
            xs, ys, bad, last = [], [], 0, None
            records = zip(self.records, self.steps) if key in self.key_set else ()  # most plots' keys: none
            for r, step in records:
                if (v := metric_number(r.get(key))) is None:
                    continue
                last = v
                if drawable(v):
                    xs.append(step if step is not None else len(xs))
                    ys.append(v)
                else:
                    bad += 1
            self._columns[key] = Column(xs, ys, bad, last)
        return self._columns[key]

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of the finite values of ``key``: what a curve can draw."""
        return self.column(key).xs, self.column(key).ys

    def non_finite(self, key: str) -> int:
        """How many logged values of ``key`` are NaN or infinite, or as good as infinite (not drawn,
        but said)."""
        return self.column(key).non_finite

    def last(self, key: str) -> float | None:
        """The last logged value of ``key``, NaN and inf included: a run that ended on a NaN loss
        must not show the last finite loss as its result."""
        return self.column(key).last

    @cached_property
    def key_set(self) -> frozenset[str]:
        """Every key some record holds."""
        return frozenset(k for r in self.records for k in r)


def load_run(run_dir: Path, name: str | None = None) -> RunMetrics:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl: is it a run directory?")
    samples = run_dir / "samples.jsonl"
    name = name if name is not None else run_names([run_dir])[0]
    return RunMetrics(name, _read(path), _read(samples, "or move it aside to report without samples")
                      if samples.exists() else None)


def _read(path: Path, otherwise: str = "") -> list[dict[str, Any]]:
    """``read_jsonl``, whose errors say the report could not read ``path``: `rlxf report` said of
    a ``samples.jsonl`` that is a directory "cannot write the report to .../samples.jsonl"."""
    try:
        return read_jsonl(path)
    except OSError as e:
        raise UserInputError(f"cannot read {path}: {e.strerror or e}; make it the JSONL file the run wrote, "
                             f"readable by this user{', ' + otherwise if otherwise else ''}") from None


def run_names(run_dirs: list[Path]) -> list[str]:
    """Each run's label: its directory's name, with as many parent folders as it takes to tell
    runs apart (``seed0/grpo`` and ``seed1/grpo``: a sweep's runs share run.name), where plain
    names would draw two runs as one legend entry. Paths are resolved first, so ``.`` is named
    for the directory it stands for, not as ``""``."""
    parts = [Path(d).resolve().parts for d in run_dirs]
    depth = 1
    while True:
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names) or all(depth >= len(p) for p in parts):
            return names
        depth += 1


def default_output(run_dirs: list[Path]) -> Path:
    """``RUN/report.html`` for one run; for several, a comparison file next to the first run
    (never over one run's own report), named by the runs (or the first and a count where so
    many names would pass a file name's 255-byte limit; cut by bytes, not characters: 150
    characters of a CJK name are 450 bytes)."""
    first = Path(run_dirs[0])
    if len(run_dirs) == 1:
        return first / "report.html"
    names = [n.replace("/", "_") for n in run_names(run_dirs)]
    stem = "compare-" + "-vs-".join(names)
    if len(stem.encode()) > 200:
        head = names[0].encode()[:150].decode(errors="ignore")  # a character cut in two is dropped
        stem = f"compare-{head}-vs-{len(names) - 1}-more"
    # "." and ".." have no parent of their own: `rlxf report . ../b` wrote into the run "." itself
    beside = first.parent if first.name not in ("", "..") else first.resolve().parent
    return beside / f"{stem}.html"


def check_output(out: Path) -> Path:
    """Where the report of ``--out out`` is written: ``out``, or the file it links to (the link
    kept, as a write through it would). Refused: to replace a file that is no HTML page (``--out
    runs/x/metrics.jsonl``, a slip of tab completion, wrote the report over the run's metrics, and
    they were gone), or anything that is not a file (``--out /dev/null`` replaced the device with
    a file, as root). An empty file is replaced only when named ``.html``: a run's metrics.jsonl is
    empty until its first step ends, and its checkpoints hold empty files. Links are followed to
    the file they name (``link/metrics.jsonl``, ``page.html -> runs/x/metrics.jsonl``)."""
    target = out.resolve()
    named = f" (that is {target})" if target != out.absolute() else ""
    if target.exists() and not target.is_file():
        raise UserInputError(f"{out}{named} exists and is not a file (a directory, a device such as /dev/null, a "
                             f"pipe), so the report will not replace it; give the report a file of its own, e.g. "
                             f"--out report.html")
    where = target if out.is_symlink() else out
    if not target.is_file():
        return where
    with open(target, "rb") as f:
        head = f.read(64).lstrip().lower()
    page = head.startswith((b"<!doctype html", b"<html")) if head else target.suffix.lower() in (".html", ".htm")
    if not page:
        what = "not an HTML page" if head else "empty (as a run's metrics.jsonl is until its first step ends)"
        other = out.with_suffix(".html") if out.suffix.lower() != ".html" else out.with_name(f"{out.stem}-report.html")
        raise UserInputError(f"{out}{named} exists and is {what}, so the report will not replace it; give the "
                             f"report a file of its own, e.g. --out {other}")
    return where


def plots_for(runs: list[RunMetrics]) -> list[Plot]:
    """The plots some run has data for; each eval source's accuracy joins the accuracy plot, and a
    multi-turn run gets the mean reward of each turn of its episodes (``env/turn_reward/K``)."""
    keys = set().union(*(r.key_set for r in runs))
    sources = tuple(sorted(k for k in keys if EVAL_SOURCE.match(k)))
    plots = [Plot(p.title, p.keys + sources, p.ylabel) if p.title == "Accuracy" else p for p in PLOTS]
    turns = tuple(sorted((k for k in keys if TURN_REWARD.match(k)), key=lambda k: int(TURN_REWARD.match(k)[1])))
    if turns:
        plots.insert(1, Plot("Reward per turn (mean reward of turn K)", turns, "mean reward"))
    return [p for p in plots if any(k in keys for k in p.keys)]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def headline_rows(runs: list[RunMetrics]) -> list[list[str]]:
    """Last value of the learning metrics; the mean of the speed ones (one slow or fast step,
    such as the first with its warm-up, says little about a run). A "-" says a metric was not
    measured (no held-out prompts: no eval/accuracy); the columns of DPO and reward-model runs
    (``PAIR_HEADLINE``) are shown only where some run logged them."""
    keys = set().union(*(r.key_set for r in runs))
    last_keys = [k for k in HEADLINE_LAST if k not in PAIR_HEADLINE or k in keys]
    rows = [["run", "steps", *(f"{k} (last)" for k in last_keys), *(f"{k} (mean)" for k in HEADLINE_MEAN)]]
    for run in runs:
        row = [run.name, str(max((s for s in run.steps if s is not None), default=0))]
        for key in last_keys:
            last = run.last(key)
            row.append(_fmt(last) if last is not None else "-")
        for key in HEADLINE_MEAN:
            ys = run.series(key)[1]
            row.append(_fmt(sum(ys) / len(ys)) if ys else "-")
        rows.append(row)
    return rows


def phase_rows(runs: list[RunMetrics]) -> list[list[str]]:
    rows = [["run", *PHASES, "total"]]
    for run in runs:
        means = phase_means(run)
        total = sum(means.values())
        cells = [f"{means[p]:.3g} s ({100 * means[p] / total:.0f}%)" if p in means and total > 0 else "-"
                 for p in PHASES]
        rows.append([run.name, *cells, f"{total:.3g} s" if means else "-"])
    return rows


def sample_rows(run: RunMetrics, per_run_steps: int = SAMPLE_STEPS) -> list[list[str]]:
    """Best, worst and one random sample (seeded by run and step) of a few evenly spread steps."""
    by_step: dict[int, list[tuple[float, dict[str, Any]]]] = {}  # (reward, sample): a copy of each took seconds
    for s in run.samples or []:
        reward, step = metric_number(s.get("reward")), record_step(s) if "step" in s else 0
        if reward is not None and math.isfinite(reward) and step is not None:  # NaN is neither best nor worst
            by_step.setdefault(step, []).append((reward, s))
    steps = sorted(by_step)
    if len(steps) > per_run_steps:
        steps = sorted({steps[round(i * (len(steps) - 1) / (per_run_steps - 1))] for i in range(per_run_steps)})
    rows = [["step", "which", "reward", "correct", "prompt", "response"]]
    for step in steps:
        group = sorted(by_step[step], key=lambda pair: pair[0])
        picks = [("best", group[-1]), ("worst", group[0])]
        rest = group[1:-1]
        if rest:
            picks.append(("random", random.Random(f"{run.name}:{step}").choice(rest)))
        for which, (reward, s) in picks:
            response = str(s.get("response", ""))
            if s.get("reward_error"):
                response += f"\n[reward error: {s['reward_error']}]"
            rows.append([str(step), which, _fmt(reward), str(s.get("correct", "-")),
                         _clip(str(s.get("prompt", "")), 300), _clip(response, 600)])
    return rows


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more chars)"


def _table(rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows[1:])
    return f'<table class="{cls}"><tr>{head}</tr>{body}</table>'


def write_report(run_dirs: list[Path], out: Path | None = None) -> Path:
    """Render ``run_dirs`` into ``out`` (default: :func:`default_output`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dirs = [Path(d) for d in run_dirs]
    runs = [load_run(d, name) for d, name in zip(run_dirs, run_names(run_dirs), strict=True)]
    out = check_output(Path(out) if out else default_output(run_dirs))
    images = []
    for plot in plots_for(runs):
        fig = line_plot(plot, runs)
        images.append((plot.title, png(fig)))
        plt.close(fig)
    fig = time_plot(runs)
    images.append(("Time per phase", png(fig)))
    plt.close(fig)

    figures = "\n".join(f'<figure><img alt="{html.escape(t)}" src="data:image/png;base64,{b64}"></figure>'
                        for t, b64 in images)
    samples = "\n".join(
        f"<h3>{html.escape(r.name)}</h3>" + _table(rows, "samples")
        for r in runs if len(rows := sample_rows(r)) > 1
    ) or "<p>No samples.jsonl with rewards in these runs.</p>"
    title = "rlxf report: " + ", ".join(r.name for r in runs)
    numbered = [f"{label} is {run.name}" for label, run in zip(run_labels([r.name for r in runs]), runs)
                if label != run.name]
    numbers = (f"\n<p>The plots number the runs whose names their fonts cannot draw: "
               f"{html.escape('; '.join(numbered))}.</p>" if numbered else "")
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 16px; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; vertical-align: top; }}
th {{ background: #f3f3f3; }}
table.samples td {{ text-align: left; white-space: pre-wrap; font-family: ui-monospace, monospace;
                    max-width: 520px; overflow-wrap: anywhere; }}
.grid {{ display: flex; flex-wrap: wrap; gap: 12px; }}
figure {{ margin: 0; }}
</style></head>
<body><h1>{html.escape(title)}</h1>
<h2>Headline</h2>
{_table(headline_rows(runs))}
<h2>Curves</h2>
<p>Training curves: smoothed (exponential moving average over about a twentieth of the run), raw
values faint behind. Eval metrics: one point per evaluation.</p>{numbers}
<div class="grid">
{figures}
</div>
<h2>Time per phase (mean seconds per step)</h2>
{_table(phase_rows(runs))}
<h2>Samples: best, worst and a random response per step</h2>
{samples}
</body></html>
"""
    out.parent.mkdir(parents=True, exist_ok=True)
    # a scratch file of this process's own: a fixed ``report.html.tmp`` was shared by the report a
    # run writes at its end and an `rlxf report` of it, and replaced whatever held that name
    write_atomically(out, page.encode())
    return out

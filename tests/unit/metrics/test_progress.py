"""The plain (non-terminal) progress lines: headline metrics, and an ETA that respects time limits."""

from __future__ import annotations

import io
import re

from rich.console import Console

from rlxf.metrics.progress import ProgressDisplay


def lines(display_kwargs, updates):
    out = io.StringIO()
    with ProgressDisplay(console=Console(file=out, width=200), enabled=False, **display_kwargs) as p:
        for step, metrics in updates:
            p.update(step, metrics)
    return out.getvalue().splitlines()


def test_every_log_every_steps_a_line_with_the_headline_metrics():
    out = lines({"total": 4, "log_every": 2},
                [(s, {"reward/mean": 0.5, "accuracy": 0.25, "throughput/tokens_per_s": 1234.0}) for s in (1, 2, 3, 4)])
    assert len(out) == 2
    assert out[0].startswith("step 2/4  reward 0.500  acc 0.250  kl -  tok/s 1,234  eta ")


def test_a_time_limit_caps_the_eta_of_a_step_budget_it_will_never_reach():
    out = lines({"total": 1_000_000, "max_seconds": 60.0, "fields": ProgressDisplay.SFT_FIELDS},
                [(1, {"sft/loss": 1.0})])
    eta = float(re.search(r"eta (\d+)s", out[0]).group(1))
    assert 0 <= eta <= 60
    assert "loss 1.0000" in out[0]


def test_the_last_eval_stays_on_the_line_per_source_in_a_mixture():
    evals = {"eval/accuracy": 0.6, "eval/hard/accuracy": 0.5, "eval/easy/accuracy": 0.75,
             "eval/source_mean_accuracy": 0.625}
    out = lines({"total": 3}, [(1, {"reward/mean": 0.5}), (2, {"reward/mean": 0.5, **evals}), (3, {"reward/mean": 0.4})])
    assert "eval" not in out[0]
    assert out[1].endswith(" eval mean 0.625 (easy 0.75, hard 0.50)  eta " + out[1].rsplit("eta ", 1)[1])
    assert "eval mean 0.625 (easy 0.75, hard 0.50)" in out[2]          # kept until the next eval
    single = lines({"total": 1}, [(1, {"eval/accuracy": 0.5})])
    assert "eval acc 0.500" in single[0]

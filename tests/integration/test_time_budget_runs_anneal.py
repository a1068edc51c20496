"""RL and SFT runs with a time budget: a cosine schedule ends near min_lr_ratio when the
budget ends the run, however many steps were configured (a fake clock, 10 s a reading)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from rl_helpers import metrics, write_config
from test_time_budget_resume_review import _write_sft

from rlxf.cli.main import main
from rlxf.trainer.learner import Learner
from rlxf.trainer.state import TrainClock


def _cos(progress: float, min_ratio: float = 0.1) -> float:
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@pytest.fixture
def ten_seconds_a_reading(monkeypatch):
    ticks = itertools.count()
    monkeypatch.setattr(TrainClock, "seconds", lambda self: self.before + 10.0 * next(ticks))


def test_an_rl_run_anneals_over_its_time_budget(tmp_path, nano_model_dir, monkeypatch, ten_seconds_a_reading):
    told: list[float | None] = []
    update = Learner.update

    def spy(self, exp, step, demos=None, time_spent=None):
        told.append(time_spent)
        return update(self, exp, step, demos, time_spent)

    monkeypatch.setattr(Learner, "update", spy)
    cfg = write_config(tmp_path, nano_model_dir, rollout={"n": 2, "max_new_tokens": 4}, checkpoint={"every": 0},
                       train={"steps": 1000, "max_seconds": 100, "prompts_per_step": 2, "micro_batch_size": 4,
                              "optim": {"lr": 1e-3, "schedule": "cosine", "min_lr_ratio": 0.1}})
    assert main(["train", str(cfg)]) == 0
    rows = metrics(tmp_path / "runs" / "t")
    assert 2 < len(rows) < 1000           # the budget ended it
    assert len(told) == len(rows) and told[0] == 0.0 and told == sorted(told) and told[-1] >= 0.8
    # the steps' share (at most a few of 1000) is nearer the start than the time's but the first
    for row, spent in zip(rows, told, strict=True):
        assert row["lr"] == pytest.approx(1e-3 * _cos(max(spent, (row["step"] - 1) / 1000)), rel=1e-3)
    assert rows[-1]["lr"] < 0.2e-3
    log = (tmp_path / "runs" / "t" / "train.log").read_text()
    assert "lr schedule: cosine down to 0.1 x lr over 1000 optimizer steps, or over train.max_seconds=100" in log


def test_an_rl_run_without_a_time_budget_tells_the_schedule_nothing(tmp_path, nano_model_dir, monkeypatch):
    told = []
    update = Learner.update
    monkeypatch.setattr(Learner, "update", lambda self, exp, step, demos=None, time_spent=None: (
        told.append(time_spent), update(self, exp, step, demos, time_spent))[1])
    cfg = write_config(tmp_path, nano_model_dir, rollout={"n": 2, "max_new_tokens": 4}, checkpoint={"every": 0},
                       train={"steps": 2, "prompts_per_step": 2, "micro_batch_size": 4})
    assert main(["train", str(cfg)]) == 0
    assert told == [None, None]


def test_an_sft_run_anneals_over_its_time_budget(tmp_path, nano_model_dir, ten_seconds_a_reading):
    path = _write_sft(tmp_path, nano_model_dir, steps=1000, max_seconds=100,
                      optim={"lr": 1e-3, "schedule": "cosine", "min_lr_ratio": 0.1})
    assert main(["sft", str(path)]) == 0
    lrs = [json.loads(line).get("lr") for line in (tmp_path / "sft/metrics.jsonl").read_text().splitlines()]
    lrs = [lr for lr in lrs if lr is not None]
    assert 2 < len(lrs) < 1000 and lrs == sorted(lrs, reverse=True)
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] < 0.2e-3


def test_a_cosine_run_resumed_with_another_time_budget_is_refused(tmp_path, nano_model_dir, capsys):
    """Its lr annealed over the budget; a new one would move it back up the curve (as new steps
    would): refused, with the ways out. A constant schedule may raise its budget to train on."""
    cfg = write_config(tmp_path, nano_model_dir, rollout={"n": 2, "max_new_tokens": 4}, checkpoint={"every": 1},
                       train={"steps": 2, "max_seconds": 1000, "prompts_per_step": 2, "micro_batch_size": 4})
    assert main(["train", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["train", str(cfg), "--resume", "train.max_seconds=2000"]) == 2
    err = capsys.readouterr().err
    assert "train.max_seconds changed" in err and "new run from the checkpoint's model" in err
    run = tmp_path / "runs" / "t"
    assert [r["step"] for r in metrics(run)] == [1, 2]          # nothing written over
    # without the run's config.yaml to compare with, the checkpoint's clock still knows the budget
    (run / "config.yaml").rename(tmp_path / "kept.yaml")
    assert main(["train", str(cfg), "--resume", "train.max_seconds=2000"]) == 2
    assert not (run / "config.yaml").exists()                   # refused before the run's config was written
    err = capsys.readouterr().err
    assert "train.max_seconds=1000" in err and "2000" in err and "new run from the checkpoint's model" in err
    assert [r["step"] for r in metrics(run)] == [1, 2]
    (tmp_path / "kept.yaml").rename(run / "config.yaml")
    # the same budget resumes (nothing left to train), and says how to train on
    assert main(["train", str(cfg), "--resume"]) == 0
    assert "start a new run from its model" in capsys.readouterr().err


def test_a_constant_schedule_may_change_its_budget_on_resume(tmp_path, nano_model_dir):
    cfg = write_config(tmp_path, nano_model_dir, rollout={"n": 2, "max_new_tokens": 4}, checkpoint={"every": 1},
                       train={"steps": 1, "max_seconds": 1000, "prompts_per_step": 2, "micro_batch_size": 4,
                              "optim": {"schedule": "constant"}})
    assert main(["train", str(cfg)]) == 0
    assert main(["train", str(cfg), "--resume", "train.steps=2", "train.max_seconds=2000"]) == 0
    assert [r["step"] for r in metrics(tmp_path / "runs" / "t")] == [1, 2]

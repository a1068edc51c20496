"""A --resume of a run that is already done (its steps, lowered since, or its time budget) trains
nothing and returns the run's last metrics record, as the run returned it when it ended: RL
returned {} (the CLI said "done: no metrics"), SFT did too when its steps were done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_loop_lifecycle_review import FallingAccuracy, _config

from rlxf.config import load_config
from rlxf.run_dir import RunDir
from rlxf.trainer.loop import train
from rlxf.trainer.sft import run_sft


def _last_record(run: Path) -> dict:
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    return {k: v for k, v in record.items() if k != "step"}


@pytest.mark.parametrize(
    "again",
    [{"steps": 2}, {"steps": 1}, {"steps": 4, "max_seconds": 1e-9}],
    ids=["same steps", "steps lowered", "time budget spent"],
)
def test_resuming_a_finished_rl_run_returns_its_last_record(tmp_path, tokenizer_for_tests, again):
    cfg = _config(tmp_path, 2)
    done = train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), FallingAccuracy(tokenizer_for_tests))
    run = RunDir.open(cfg.run.output_dir, cfg.run.name, resume=True)
    again_train = cfg.train.model_copy(update=again)
    if "max_seconds" in again:  # a constant lr: a cosine schedule anneals over the budget, which --resume keeps
        again_train = again_train.model_copy(update={"optim": again_train.optim.model_copy(update={"schedule": "constant"})})
    cfg = cfg.model_copy(update={"train": again_train})
    resumed = train(cfg, run, FallingAccuracy(tokenizer_for_tests), resume=True)
    assert resumed == done == _last_record(run.path)
    assert resumed["reward/mean"] == 0.5  # FallingAccuracy scores the responses 0, 1, 0, 1


def _sft_config(tmp_path: Path, model: Path, steps: int):
    path = tmp_path / "sft.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "run": {"name": "sft", "output_dir": str(tmp_path / "runs")},
                "model": {"path": str(model)},
                "data": {
                    "task": "arithmetic",
                    "task_options": {"max_digits": 1, "ops": "+"},
                    "train_size": 8,
                    "test_size": 2,
                    "max_prompt_len": 32,
                },
                "rollout": {"max_new_tokens": 2},
                "sft": {"steps": steps, "batch_size": 2, "micro_batch_size": 2},
                "eval": {"num_problems": 2},
                "checkpoint": {"every": 1},
                "logging": {"progress": False},
            }
        )
    )
    return load_config(path)


@pytest.mark.parametrize("steps", [2, 1], ids=["same steps", "steps lowered"])
def test_resuming_a_finished_sft_run_returns_its_last_record(tmp_path, nano_model_dir, steps):
    cfg = _sft_config(tmp_path, nano_model_dir, 2)
    done = run_sft(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name, command="sft"))
    run = RunDir.open(cfg.run.output_dir, cfg.run.name, resume=True, command="sft")
    resumed = run_sft(_sft_config(tmp_path, nano_model_dir, steps), run, resume=True)
    assert resumed == done == _last_record(run.path)
    assert "eval/accuracy" in resumed and "sft/loss" in resumed
    assert [json.loads(line)["step"] for line in run.metrics.read_text().splitlines()] == [1, 2]

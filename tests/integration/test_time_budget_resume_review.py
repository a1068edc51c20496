"""train.max_seconds / sft.max_seconds budget a run's whole training time, across --resume."""

from __future__ import annotations

import json

import torch
import yaml
from rl_helpers import metrics, write_config

from rlxf.cli.main import main
from rlxf.trainer.checkpoint import STATE_FILE


def _trained_seconds(ckpt) -> float:
    return torch.load(ckpt / STATE_FILE, weights_only=True)["clock"]["seconds"]


def test_a_resumed_rl_run_counts_the_time_it_trained_before(tmp_path, nano_model_dir):
    """A step trained (well over 1 ms); resumed with a budget of 1 ms and more steps, the budget
    is already spent: nothing more to train (the clock used to restart, training another step)."""
    # (a constant schedule: a cosine one anneals over the run's steps and budget, which --resume keeps)
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 1, "prompts_per_step": 2,
                                                        "optim": {"schedule": "constant"}},
                       rollout={"n": 2, "max_new_tokens": 4}, data={"test_size": 4}, checkpoint={"every": 1})
    assert main(["train", str(cfg)]) == 0
    run = tmp_path / "runs" / "t"
    assert _trained_seconds(run / "checkpoints/step_1") > 0
    assert main(["train", str(cfg), "--resume", "train.steps=3", "train.max_seconds=0.001"]) == 0
    assert [r["step"] for r in metrics(run)] == [1]
    assert not (run / "checkpoints/step_2").exists()


def _write_sft(tmp_path, nano_model_dir, **sft):
    cfg = {
        "run": {"name": "sft", "output_dir": str(tmp_path), "seed": 0},
        "model": {"path": str(nano_model_dir)},
        "data": {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"},
                 "train_size": 40, "test_size": 4, "max_prompt_len": 32},
        "rollout": {"max_new_tokens": 4},
        "reward": {"verifiers": [{"type": "numeric", "extract": ["last_number"]}]},
        "sft": {"batch_size": 4, "micro_batch_size": 4, **sft},
        "eval": {"num_problems": 4},
        "checkpoint": {"every": 1},
        "logging": {"progress": False},
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_resumed_sft_run_counts_the_time_it_trained_before(tmp_path, nano_model_dir):
    path = _write_sft(tmp_path, nano_model_dir, steps=2)
    assert main(["sft", str(path)]) == 0
    run = tmp_path / "sft"
    assert 0 < _trained_seconds(run / "checkpoints/step_1") < _trained_seconds(run / "checkpoints/step_2")
    assert main(["sft", str(path), "--resume", "sft.steps=4", "sft.max_seconds=0.001"]) == 0
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert not (run / "checkpoints/step_3").exists()
    # a raised budget trains on, from the time already trained
    assert main(["sft", str(path), "--resume", "sft.steps=3", "sft.max_seconds=1000"]) == 0
    assert (run / "checkpoints/step_3").exists()
    assert _trained_seconds(run / "checkpoints/step_3") > _trained_seconds(run / "checkpoints/step_2")


def test_a_checkpoint_without_a_clock_resumes_from_zero_and_says_so(tmp_path, nano_model_dir, capsys):
    """A checkpoint of an rlxf from before the clock: its time counts as 0, and the log says so."""
    path = _write_sft(tmp_path, nano_model_dir, steps=1)
    assert main(["sft", str(path)]) == 0
    state_file = tmp_path / "sft/checkpoints/step_1" / STATE_FILE
    state = torch.load(state_file, weights_only=True)
    del state["clock"]
    torch.save(state, state_file)
    capsys.readouterr()
    assert main(["sft", str(path), "--resume", "sft.steps=2", "sft.max_seconds=1000"]) == 0
    assert "has no training time (saved by an older rlxf)" in capsys.readouterr().err
    assert (tmp_path / "sft/checkpoints/step_2").exists()

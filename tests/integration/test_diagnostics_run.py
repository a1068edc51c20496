"""The diagnostics read the metric names a real run logs: an untrained model that never earns
the reward gets the "no signal" warning in its train.log, with what to do about it."""

from __future__ import annotations

from rl_helpers import write_config

from rlxf.cli.main import main


def test_a_run_without_learning_signal_is_told_so(tmp_path, nano_model_dir):
    # 3-digit sums, which the untrained nano model never gets right: every group's rewards are equal
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 10, "prompts_per_step": 2, "micro_batch_size": 8},
                       data={"task": "arithmetic", "task_options": {"min_digits": 3, "max_digits": 3, "ops": "+"},
                             "train_size": 100, "test_size": 4, "max_prompt_len": 64},
                       reward={"verifiers": [{"type": "numeric", "name": "correct", "extract": ["last_number"]}]},
                       rollout={"n": 2, "max_new_tokens": 4}, checkpoint={"every": 0, "save_final": False})
    assert main(["train", str(cfg)]) == 0
    log = (tmp_path / "runs" / "t" / "train.log").read_text()
    assert "100% of groups had equal rewards" in log
    assert "start from a model that is sometimes right" in log and "rollout.n" in log

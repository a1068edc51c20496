"""SIGTERM stops `rlxf sft`, `rlxf rm` and `rlxf dpo` as it stops `rlxf train`: the step in
progress finishes and is checkpointed, the exit code is 128 + 15, stderr names the checkpoint and
the --resume command, and --resume continues from it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from pref_helpers import pair_config, read_metrics
from rl_helpers import HERE, REPO, caught_outside, signal_after_first

from rlxf.cli.main import main

PAIRS = {"steps": 10_000, "batch_size": 4, "micro_batch_size": 4, "optim": {"lr": 1e-3}}


def sft_config(tmp_path, model_dir) -> os.PathLike:
    cfg = {"run": {"name": "sft", "output_dir": str(tmp_path / "runs"), "seed": 0},
           "model": {"path": str(model_dir)},
           "data": {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"},
                    "train_size": 64, "test_size": 1, "max_prompt_len": 32},
           "rollout": {"max_new_tokens": 4}, "eval": {"num_problems": 1},
           "sft": {"steps": 10_000, "batch_size": 4, "micro_batch_size": 4},
           "logging": {"progress": False}}
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _trained_a_step(run) -> bool:
    path = run / "metrics.jsonl"
    complete = path.read_text().split("\n")[:-1] if path.exists() else []  # what follows the last newline may be cut
    return any(json.loads(line)["step"] >= 1 for line in complete)


@pytest.mark.parametrize("command", ["sft", "rm", "dpo"])
def test_sigterm_checkpoints_the_step_and_resume_continues(tmp_path, nano_model_dir, command):
    if command == "sft":
        cfg = sft_config(tmp_path, nano_model_dir)
    else:
        cfg = pair_config(tmp_path, nano_model_dir, command, PAIRS, n_train=16, n_test=4, checkpoint={"every": 0})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "rlxf.cli.main", command, str(cfg)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "runs" / command
    try:
        deadline = time.monotonic() + 240  # a generous bound on start-up, not a timing assertion
        # a finished training step (rm and dpo log their start's evaluation as step 0 first: a
        # signal there stops the run before any step, test_sigterm_during_the_first_evaluation)
        while not _trained_a_step(run):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the run wrote no step"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    last = read_metrics(run)[-1]["step"]
    checkpoint = run / "checkpoints" / f"step_{last}"
    assert (checkpoint / "model" / "config.json").is_file()
    assert f"stopped by SIGTERM after step {last}" in err
    assert f"continue from {checkpoint}" in err and f"rlxf {command} {cfg} --resume" in err
    assert main([command, str(cfg), "--resume", f"{command}.steps={last + 1}"]) == 0
    steps = [m["step"] for m in read_metrics(run)]   # (SFT logs its last step again with the final eval)
    assert sorted(set(steps) - {0}) == list(range(1, last + 2)) and steps == sorted(steps)
    assert (run / "checkpoints" / f"step_{last + 1}" / "model" / "config.json").is_file()


@pytest.mark.parametrize("command", ["rm", "dpo"])
def test_sigterm_during_the_first_evaluation_stops_there(tmp_path, nano_model_dir, monkeypatch, capsys, command):
    """SIGTERM while rm or dpo evaluates its start model (step 0) stops the run once that
    evaluation is logged: exit 143, no checkpoint, and --resume starts over with one step-0
    record. Before, the handler was installed after it, so the signal ended the process."""
    from rlxf.trainer.dpo import DPOObjective
    from rlxf.trainer.reward_model import BradleyTerryObjective

    objective = {"rm": BradleyTerryObjective, "dpo": DPOObjective}[command]
    monkeypatch.setattr(objective, "evaluate", signal_after_first(objective.evaluate))
    cfg = pair_config(tmp_path, nano_model_dir, command, {**PAIRS, "steps": 2}, n_train=16, n_test=4)
    with caught_outside() as caught:
        assert main([command, str(cfg)]) == 128 + signal.SIGTERM
    assert not caught
    run = tmp_path / "runs" / command
    assert [m["step"] for m in read_metrics(run)] == [0]
    assert not list((run / "checkpoints").glob("step_*"))
    assert "stopped by SIGTERM after step 0" in capsys.readouterr().err
    assert main([command, str(cfg), "--resume"]) == 0
    assert [m["step"] for m in read_metrics(run)] == [0, 1, 2]


def test_sigterm_during_sfts_last_evaluation_lets_it_finish_with_its_checkpoint(tmp_path, nano_model_dir,
                                                                                 monkeypatch):
    """SFT evaluates its last step, and saves it after the loop (always when checkpoint.every and
    save_final leave it unsaved). A SIGTERM during that evaluation lets the run finish both and
    exit 0, its checkpoint written: the signal asked for what the run was about to do anyway."""
    import rlxf.trainer.evaluate as evaluate  # sft imports evaluate_prompts from it when it runs

    monkeypatch.setattr(evaluate, "evaluate_prompts", signal_after_first(evaluate.evaluate_prompts))
    cfg = sft_config(tmp_path, nano_model_dir)
    with caught_outside() as caught:
        assert main(["sft", str(cfg), "sft.steps=2", "sft.eval_every=0", "checkpoint.every=0",
                     "checkpoint.save_final=false"]) == 0
    assert not caught
    run = tmp_path / "runs" / "sft"
    assert (run / "checkpoints" / "step_2" / "model" / "config.json").is_file()
    logged = read_metrics(run)   # each step, the last one with its evaluation
    assert [m["step"] for m in logged] == [1, 2] and "eval/accuracy" in logged[-1]

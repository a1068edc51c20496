"""Resuming past damage: a damaged trainer_state.pt is reported as damage (naming the file and
what to do); every recipe's resume (RL, SFT, RM, DPO) skips a damaged newest checkpoint for the
intact one before it; a resume on a full disk keeps the run's config.yaml whole."""

from __future__ import annotations

import os

import pytest
import torch

from rlxf.trainer.checkpoint import CheckpointDamaged, intact_checkpoint, load_trainer_state, save_checkpoint


def _write_model_file(directory):
    from safetensors.torch import save_file

    (directory / "model").mkdir()
    save_file({"w": torch.zeros(64)}, directory / "model" / "model.safetensors")


def _cut_in_half(path):
    os.truncate(path, path.stat().st_size // 2)


def test_a_truncated_trainer_state_is_reported_as_damage_naming_the_file(tmp_path):
    ckpt = save_checkpoint(tmp_path, 1, write=lambda d: None, state={"sampler": {}}, keep_last=2)
    _cut_in_half(ckpt / "trainer_state.pt")
    with pytest.raises(CheckpointDamaged) as err:
        load_trainer_state(ckpt)
    message = str(err.value)
    assert str(ckpt / "trainer_state.pt") in message and f"Delete {ckpt}" in message


def test_intact_checkpoint_skips_a_damaged_newer_one(tmp_path):
    for step in (1, 2):
        save_checkpoint(tmp_path, step, write=_write_model_file, state={"sampler": {}}, keep_last=2)
    _cut_in_half(tmp_path / "step_2" / "model" / "model.safetensors")
    assert intact_checkpoint(tmp_path) == tmp_path / "step_1"
    _cut_in_half(tmp_path / "step_1" / "trainer_state.pt")
    with pytest.raises(CheckpointDamaged, match="no intact checkpoint to resume from"):
        intact_checkpoint(tmp_path)


def test_a_resave_killed_between_its_two_renames_keeps_the_checkpoint(tmp_path):
    """Re-saving step_N sets the old one aside (.old-) before renaming the new one in; a kill
    between the two leaves no step_N. The resume and the next save put the old one back."""
    for step in (1, 2):
        save_checkpoint(tmp_path, step, write=_write_model_file, state={"sampler": {}}, keep_last=1)
    assert [p.name for p in tmp_path.iterdir()] == ["step_2"]
    (tmp_path / "step_2").rename(tmp_path / ".old-step_2-4242")              # killed here
    (tmp_path / ".tmp-step_2-4242").mkdir()                                  # the new copy, not renamed in
    assert intact_checkpoint(tmp_path) == tmp_path / "step_2"
    (tmp_path / "step_2").rename(tmp_path / ".old-step_2-4242")              # again, now for the next save
    save_checkpoint(tmp_path, 3, write=_write_model_file, state={"sampler": {}}, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_2", "step_3"]


FULL_DISK_RESUME = """
import resource, signal, sys
from rlxf.config import load_config
from rlxf.run_dir import RunDir
from rlxf.trainer.state import RunState
run = RunDir.open(sys.argv[1], "r", resume=True)
cfg = load_config(None, ["run.name=r", "logging.progress=false", "model.path=nano", "data.task=arithmetic"])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)             # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
try:
    RunState.fresh(run, cfg)
except Exception as e:  # the old code: OSError; now a RunDirError
    print("refused:", type(e).__name__, e)
"""


def test_a_resume_on_a_full_disk_keeps_the_runs_config(tmp_path):
    """A resume rewrites config.yaml; when the write fails (disk full), the run's config as it
    was must still be there, whole (``--resume`` and ``config=<run>/config.yaml`` read it)."""
    import subprocess
    import sys

    from rlxf.config import dump_config, load_config
    from rlxf.run_dir import RunDir

    run = RunDir.open(tmp_path, "r", command="train")
    before = dump_config(load_config(None, ["run.name=r", "model.path=nano", "data.task=arithmetic"]))
    run.config.write_text(before)
    run.release()
    assert len(before) > 512
    r = subprocess.run([sys.executable, "-c", FULL_DISK_RESUME, str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert run.config.read_text() == before
    assert "refused:" in r.stdout and str(run.config) in r.stdout   # the error names the file
    assert [p.name for p in run.path.iterdir() if p.name.startswith(".config")] == []


def test_sft_resume_skips_a_damaged_newest_checkpoint(tmp_path, nano_model_dir):
    import json

    import yaml

    from rlxf.cli.main import main

    path = tmp_path / "sft.yaml"
    cfg = {"run": {"name": "sft", "output_dir": str(tmp_path), "seed": 0}, "model": {"path": str(nano_model_dir)},
           "data": {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"}, "train_size": 40,
                    "test_size": 4, "max_prompt_len": 32},
           "rollout": {"max_new_tokens": 4}, "reward": {"verifiers": [{"type": "numeric"}]},
           "sft": {"steps": 4, "batch_size": 4, "micro_batch_size": 4, "eval_every": 0},
           "checkpoint": {"every": 1, "keep_last": 3}, "logging": {"progress": False}}
    path.write_text(yaml.safe_dump(cfg))
    assert main(["sft", str(path), "sft.steps=3"]) == 0
    run = tmp_path / "sft"
    _cut_in_half(run / "checkpoints" / "step_3" / "model" / "model.safetensors")
    assert main(["sft", str(path), "--resume"]) == 0
    assert "resumed from " + str(run / "checkpoints" / "step_2") in (run / "train.log").read_text()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]   # step 3 trained again and logged once; one record per step
    assert main(["sft", str(path), "--resume"]) == 0            # a finished run: nothing to do, nothing added
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == steps

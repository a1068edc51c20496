"""A ``step_N`` without ``trainer_state.pt`` newer than every complete checkpoint: rlxf writes that
file last inside a hidden directory renamed whole into place, so it is a checkpoint cut short
(a copy or move of the run stopped before its last file), and damage. The resume used to pass
over it without a word, and, when it was the only one, start the run over from step 0, emptying
metrics.jsonl."""

from __future__ import annotations

import logging

import pytest
import torch

from rlxf.trainer.checkpoint import CheckpointDamaged, intact_checkpoint, save_checkpoint


def _write(directory):
    torch.save({"w": torch.ones(2)}, directory / "learner_state.pt")


def _checkpoints(root, *steps):
    for step in steps:
        save_checkpoint(root, step, write=_write, state={}, keep_last=len(steps))


def test_a_newest_checkpoint_cut_short_is_damage_said_and_passed_over(tmp_path, caplog):
    _checkpoints(tmp_path, 2, 4)
    (tmp_path / "step_4" / "trainer_state.pt").unlink()
    with caplog.at_level(logging.WARNING, logger="rlxf"):
        assert intact_checkpoint(tmp_path) == tmp_path / "step_2"
    assert f"{tmp_path / 'step_4' / 'trainer_state.pt'}: missing" in caplog.text


def test_the_only_checkpoint_cut_short_stops_the_resume_instead_of_starting_over(tmp_path):
    _checkpoints(tmp_path, 4)
    (tmp_path / "step_4" / "trainer_state.pt").unlink()
    with pytest.raises(CheckpointDamaged, match=r"no intact checkpoint .*step_4/trainer_state\.pt: missing"):
        intact_checkpoint(tmp_path)


def test_an_older_incomplete_directory_is_no_concern_of_the_resume(tmp_path, caplog):
    """An older rlxf's half-done deletion: the next save sweeps it."""
    _checkpoints(tmp_path, 2, 4)
    (tmp_path / "step_2" / "trainer_state.pt").unlink()
    with caplog.at_level(logging.WARNING, logger="rlxf"):
        assert intact_checkpoint(tmp_path) == tmp_path / "step_4"
    assert caplog.text == ""

"""``keep_last`` never deletes the newest checkpoint whose files are all there at their saved
lengths while every newer one it keeps lacks one: it deleted an intact older checkpoint whenever
the ones it kept were damaged, and a resume then found nothing intact to resume from."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from rlxf.trainer import checkpoint
from rlxf.trainer.checkpoint import STATE_FILE, intact_checkpoint, list_checkpoints, save_checkpoint


def _write(directory: Path) -> None:
    torch.save({"w": torch.ones(4)}, directory / "learner_state.pt")


def _save(root: Path, step: int, keep_last: int) -> Path:
    return save_checkpoint(root, step, write=_write, state={}, keep_last=keep_last)


def _save_damaged(root: Path, step: int, keep_last: int, monkeypatch) -> Path:
    """Save ``step``, whose optimizer state is cut short once it is in place, before rotation
    (a disk losing a file's tail after the save: nothing the writer can see)."""
    fsync = checkpoint._fsync

    def fsync_then_cut(path):
        fsync(path)
        if Path(path) == root:  # the checkpoint directory's entries: the last fsync before rotation
            state = root / f"step_{step}" / "learner_state.pt"
            state.write_bytes(state.read_bytes()[:10])

    with monkeypatch.context() as m:
        m.setattr(checkpoint, "_fsync", fsync_then_cut)
        return _save(root, step, keep_last)


def _steps(root: Path) -> list[int]:
    return [n for n, _ in list_checkpoints(root)]


def test_keep_last_1_keeps_the_previous_checkpoint_when_the_new_one_is_damaged(tmp_path, monkeypatch, caplog):
    _save(tmp_path, 1, keep_last=1)
    with caplog.at_level(logging.WARNING, logger="rlxf"):
        _save_damaged(tmp_path, 2, keep_last=1, monkeypatch=monkeypatch)
    assert _steps(tmp_path) == [1, 2]
    assert f"keeping checkpoint {tmp_path / 'step_1'} beyond checkpoint.keep_last = 1" in caplog.text
    assert "step_2/learner_state.pt: 10 bytes, saved with" in caplog.text
    assert intact_checkpoint(tmp_path) == tmp_path / "step_1"


def test_the_newest_intact_checkpoint_is_kept_when_every_kept_one_lost_a_file(tmp_path, monkeypatch):
    for step in (1, 2):
        _save(tmp_path, step, keep_last=2)
    (tmp_path / "step_2" / "learner_state.pt").unlink()
    _save_damaged(tmp_path, 3, keep_last=2, monkeypatch=monkeypatch)
    assert _steps(tmp_path) == [1, 2, 3]
    assert intact_checkpoint(tmp_path) == tmp_path / "step_1"


def test_an_older_checkpoint_whose_trainer_state_does_not_read_back_is_not_kept(tmp_path, monkeypatch):
    for step in (1, 2):
        _save(tmp_path, step, keep_last=3)
    state = tmp_path / "step_2" / STATE_FILE
    state.write_bytes(state.read_bytes()[:100])
    _save_damaged(tmp_path, 3, keep_last=1, monkeypatch=monkeypatch)
    assert _steps(tmp_path) == [1, 3]
    assert intact_checkpoint(tmp_path) == tmp_path / "step_1"


def test_the_spared_checkpoint_goes_once_a_newer_kept_one_is_intact(tmp_path, monkeypatch):
    _save(tmp_path, 1, keep_last=1)
    _save_damaged(tmp_path, 2, keep_last=1, monkeypatch=monkeypatch)
    _save(tmp_path, 3, keep_last=1)
    assert _steps(tmp_path) == [3]


@pytest.mark.parametrize("keep_last", [1, 2])
def test_an_intact_new_checkpoint_rotates_as_before(tmp_path, keep_last):
    for step in (1, 2, 3):
        _save(tmp_path, step, keep_last)
    assert _steps(tmp_path) == [1, 2, 3][-keep_last:]

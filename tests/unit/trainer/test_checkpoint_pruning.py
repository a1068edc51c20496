"""Pruning old checkpoints (``keep_last``) survives a kill halfway through: a checkpoint is
hidden before its files go, and each save sweeps what an earlier killed save left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlxf.trainer import checkpoint
from rlxf.trainer.checkpoint import STATE_FILE, list_checkpoints, save_checkpoint


def _write(directory: Path) -> None:
    """A stand-in for the placement's save: a model and the optimizer state."""
    (directory / "model").mkdir()
    (directory / "model" / "model.safetensors").write_bytes(b"weights")
    (directory / "learner_state.pt").write_bytes(b"optimizer")


def _save(root: Path, step: int, keep_last: int = 2) -> Path:
    return save_checkpoint(root, step, write=_write, state={}, keep_last=keep_last)


def _entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


def test_a_kill_while_a_checkpoint_is_deleted_leaves_no_half_checkpoint_and_the_next_save_sweeps_it(
        tmp_path, monkeypatch):
    for step in (1, 2):
        _save(tmp_path, step)

    def killed_after_one_file(path, ignore_errors=False):  # rmtree's order: trainer_state.pt went first
        (Path(path) / STATE_FILE).unlink()
        raise Killed

    with monkeypatch.context() as m, pytest.raises(Killed):
        m.setattr(checkpoint.shutil, "rmtree", killed_after_one_file)
        _save(tmp_path, 3)  # pruning step_1 is killed halfway
    visible = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert all((p / STATE_FILE).exists() for p in visible), "a step_N lost part of its files"
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]

    _save(tmp_path, 4)
    assert _entries(tmp_path) == ["step_3", "step_4"]


def test_a_save_sweeps_hidden_leftovers_and_incomplete_checkpoints_older_than_the_newest(tmp_path):
    for step in (1, 2):
        _save(tmp_path, step)
    half = tmp_path / "step_0"  # what an older rlxf's killed rmtree left: the optimizer state, no weights
    (half / "model").mkdir(parents=True)
    (half / "learner_state.pt").write_bytes(b"optimizer")
    for name in (".tmp-step_3-11", ".old-step_2-12", ".del-step_1-13"):
        (tmp_path / name / "model").mkdir(parents=True)
    later = tmp_path / "step_9"  # incomplete but newer than every checkpoint: not a leftover of ours
    later.mkdir()
    _save(tmp_path, 3)
    assert _entries(tmp_path) == ["step_2", "step_3", "step_9"]


def test_an_incomplete_checkpoint_is_swept_even_when_no_older_one_is_pruned(tmp_path):
    """The reported case: keep_last never counted the half-deleted step_231, so it stayed."""
    (tmp_path / "step_231" / "model").mkdir(parents=True)
    (tmp_path / "step_231" / "learner_state.pt").write_bytes(b"optimizer")
    _save(tmp_path, 232, keep_last=3)
    _save(tmp_path, 233, keep_last=3)
    assert _entries(tmp_path) == ["step_232", "step_233"]


def test_re_saving_a_step_replaces_it_and_keeps_the_newest(tmp_path):
    for step in (1, 2, 2):
        _save(tmp_path, step)
    assert _entries(tmp_path) == ["step_1", "step_2"]

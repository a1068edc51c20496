"""Checkpoint damage the file formats alone do not show (a file gone, a plain-text file cut
short), and a save that fails halfway (disk full, a second Ctrl-C): the previous checkpoint is
what a resume gets, and nothing half-written is left to fill the disk."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from rlxf.trainer.checkpoint import CheckpointDamaged, intact_checkpoint, save_checkpoint


def _write(directory):
    """What a placement's save writes: a model directory and the learner's state."""
    from safetensors.torch import save_file

    (directory / "model").mkdir()
    save_file({"w": torch.zeros(64)}, directory / "model" / "model.safetensors")
    (directory / "model" / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    torch.save({"optim": {"lr": 0.1}}, directory / "learner_state.pt")


def _two_checkpoints(root):
    for step in (1, 2):
        save_checkpoint(root, step, write=_write, state={"sampler": {}}, keep_last=2)


@pytest.mark.parametrize("name", ["learner_state.pt", "model/model.safetensors"])
def test_a_checkpoint_missing_a_file_is_damaged_and_the_one_before_it_resumed(tmp_path, name, caplog):
    _two_checkpoints(tmp_path)
    (tmp_path / "step_2" / name).unlink()
    assert intact_checkpoint(tmp_path) == tmp_path / "step_1"
    assert str(tmp_path / "step_2" / name) in caplog.text and "missing" in caplog.text


def test_a_text_file_cut_short_is_damage(tmp_path, caplog):
    """A format without a check of its own (a template, a vocabulary) cut short is still found:
    its length is not the one saved."""
    _two_checkpoints(tmp_path)
    template = tmp_path / "step_2" / "model" / "chat_template.jinja"
    os.truncate(template, 10)
    assert intact_checkpoint(tmp_path) == tmp_path / "step_1"
    assert f"{template}: 10 bytes, saved with" in caplog.text


def test_every_checkpoint_missing_a_file_names_each(tmp_path):
    _two_checkpoints(tmp_path)
    for step in (1, 2):
        (tmp_path / f"step_{step}" / "learner_state.pt").unlink()
    with pytest.raises(CheckpointDamaged, match="no intact checkpoint") as err:
        intact_checkpoint(tmp_path)
    for step in (1, 2):
        assert str(tmp_path / f"step_{step}" / "learner_state.pt") in str(err.value)


def test_a_checkpoint_saved_without_a_file_list_is_still_read(tmp_path):
    """Checkpoints of an rlxf from before the list: checked by format alone, as before."""
    _two_checkpoints(tmp_path)
    state = tmp_path / "step_2" / "trainer_state.pt"
    saved = torch.load(state, weights_only=True)
    del saved["files"]
    torch.save(saved, state)
    assert intact_checkpoint(tmp_path) == tmp_path / "step_2"


def _disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_disk_full_while_the_models_are_written_keeps_the_previous_checkpoint_and_frees_the_space(tmp_path):
    _two_checkpoints(tmp_path)

    def write_then_fill(directory):
        _write(directory)
        _disk_full()

    for step in (3, 2):   # a new step, and a re-save of the newest
        with pytest.raises(OSError, match="No space left"):
            save_checkpoint(tmp_path, step, write=write_then_fill, state={"sampler": {}}, keep_last=2)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1", "step_2"]   # no .tmp- holding the disk
        assert intact_checkpoint(tmp_path) == tmp_path / "step_2"


def test_a_disk_full_while_the_trainer_state_is_written_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    _two_checkpoints(tmp_path)
    monkeypatch.setattr(torch, "save", _disk_full)   # the trainer state, written last
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(tmp_path, 3, write=lambda d: None, state={"sampler": {}}, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1", "step_2"]
    assert intact_checkpoint(tmp_path) == tmp_path / "step_2"


def test_a_second_ctrl_c_between_the_renames_of_a_re_save_puts_the_checkpoint_back(tmp_path, monkeypatch):
    """Re-saving step_2 sets the old one aside before renaming the new one in; a KeyboardInterrupt
    between the two must not leave the run without its step_2 until the next resume."""
    from pathlib import Path

    _two_checkpoints(tmp_path)
    real = Path.rename

    def interrupted(self, target):
        if self.name.startswith(".tmp-"):
            raise KeyboardInterrupt
        return real(self, target)

    monkeypatch.setattr(Path, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, write=_write, state={"sampler": {}}, keep_last=2)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1", "step_2"]
    assert (tmp_path / "step_2" / "trainer_state.pt").exists()

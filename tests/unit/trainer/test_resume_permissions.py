"""A checkpoint or run directory this process may not read or write (its owner, its mode, a
read-only filesystem, a disk's I/O error) is not damage: the resume stops, naming the file, the
errno and what to do, and changes nothing. It used to count as damage: the resume took the
checkpoint before it, and the next save deleted the newer one.

Root passes every permission check, so as root (these tests' usual user) the unreadable part is
read from a child process that dropped to ``nobody``."""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rlxf.run_dir import RunDir, RunDirError
from rlxf.trainer.checkpoint import (
    CheckpointUnreadable,
    intact_checkpoint,
    load_trainer_state,
    save_checkpoint,
)

NOBODY = 65534


def _unprivileged(fn: Callable[[], Any]) -> Any:
    """``fn()``'s result, or the error it raised, run by a user whom file modes bind."""
    if os.geteuid() != 0:
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe and leave without pytest's exit handlers
        try:
            os.close(read)
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            except OSError as e:  # a container that may not switch users
                outcome = ("skip", f"cannot become nobody here: {e}")
            else:
                try:
                    outcome = ("returned", fn())
                except BaseException as e:  # noqa: BLE001 - handed to the parent, which raises it
                    outcome = ("raised", e)
            with os.fdopen(write, "wb") as f:
                pickle.dump(outcome, f)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        how, value = pickle.load(f)
    os.waitpid(pid, 0)
    if how == "skip":
        pytest.skip(value)
    if how == "raised":
        raise value
    return value


@pytest.fixture
def shared_tmp():
    """A directory ``nobody`` can enter (pytest's tmp_path is under a directory only root enters)."""
    path = Path(tempfile.mkdtemp())
    path.chmod(0o755)
    yield path
    for item in [path, *path.rglob("*")]:  # modes back, so that a non-root user can delete it
        if not item.is_symlink():
            item.chmod(0o755)
    shutil.rmtree(path)


def _write(directory: Path) -> None:
    from safetensors.torch import save_file

    (directory / "model").mkdir()
    save_file({"w": torch.zeros(4)}, directory / "model" / "model.safetensors")
    (directory / "model" / "chat_template.jinja").write_text("{{ messages }}")
    torch.save({"optim": {"lr": 0.1}}, directory / "learner_state.pt")


def _two_checkpoints(root: Path) -> None:
    for step in (1, 2):
        save_checkpoint(root, step, write=_write, state={}, keep_last=2)
    for item in root.rglob("*"):  # readable by everyone, as a checkpoint normally is
        item.chmod(0o755 if item.is_dir() else 0o644)


def _contents(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if stat.S_ISREG(p.stat().st_mode)
    }


@pytest.mark.parametrize(
    "name",
    ["model/model.safetensors", "learner_state.pt", "trainer_state.pt", "model/chat_template.jinja", "model"],
)
def test_a_checkpoint_file_this_user_may_not_read_stops_the_resume_naming_it(shared_tmp, name):
    """A safetensors or .pt file read as damage (the resume took step_1); a plain file passed as
    intact; a directory that cannot be listed was skipped with its files."""
    root = shared_tmp / "checkpoints"
    _two_checkpoints(root)
    before = _contents(root)
    (root / "step_2" / name).chmod(0o000)
    with pytest.raises(CheckpointUnreadable) as err:
        _unprivileged(lambda: intact_checkpoint(root))
    said = str(err.value)
    assert f"cannot read {root / 'step_2' / name} (EACCES: Permission denied)" in said
    assert "nothing was changed" in said and "readable by this user" in said
    (root / "step_2" / name).chmod(0o755)
    assert _contents(root) == before


def _paths_as_in_python_3_13(monkeypatch):
    """From Python 3.13 ``Path.exists``/``is_file``/``is_dir`` answer False to any OSError (EACCES
    included), where 3.10-3.12 raise it: an unreadable checkpoint must not read as a missing one."""
    for name in ("exists", "is_file", "is_dir"):
        real = getattr(Path, name)

        def quiet(self, *args, _real=real, **kwargs):
            try:
                return _real(self, *args, **kwargs)
            except OSError:
                return False

        monkeypatch.setattr(Path, name, quiet)


@pytest.mark.parametrize("python", ["3.10-3.12", "3.13+"])
def test_a_checkpoint_directory_this_user_may_not_enter_stops_the_resume_naming_it(shared_tmp, monkeypatch,
                                                                                   python):
    """``chmod 000 step_2``: listing the checkpoints raised Python's bare PermissionError; under
    3.13's Path the newest checkpoint read as damaged and the resume went back one."""
    if python == "3.13+":
        _paths_as_in_python_3_13(monkeypatch)
    root = shared_tmp / "checkpoints"
    _two_checkpoints(root)
    before = _contents(root)
    (root / "step_2").chmod(0o000)
    with pytest.raises(CheckpointUnreadable, match=r"step_2.* \(EACCES: Permission denied\).*nothing was changed"):
        _unprivileged(lambda: intact_checkpoint(root))
    (root / "step_2").chmod(0o755)
    assert _contents(root) == before


def test_an_unreadable_trainer_state_is_said_as_such(shared_tmp):
    """``load_trainer_state`` let the bare PermissionError through."""
    root = shared_tmp / "checkpoints"
    _two_checkpoints(root)
    (root / "step_2" / "trainer_state.pt").chmod(0o000)
    with pytest.raises(match=r"trainer_state\.pt \(EACCES: Permission denied\)"):
        _unprivileged(lambda: load_trainer_state(root / "step_2"))


def test_a_disk_error_while_a_checkpoint_is_read_stops_the_resume(tmp_path, monkeypatch):
    """EIO halfway through ``learner_state.pt`` of step_2: the disk's fault, not the file's."""
    _two_checkpoints(tmp_path)
    bad = tmp_path / "step_2" / "learner_state.pt"
    testzip = zipfile.ZipFile.testzip

    def failing_read(archive: zipfile.ZipFile) -> str | None:
        if Path(archive.filename) == bad:
            raise OSError(errno.EIO, os.strerror(errno.EIO))  # what read(2) raises: no file name
        return testzip(archive)

    monkeypatch.setattr(zipfile.ZipFile, "testzip", failing_read)
    with pytest.raises(match=rf"cannot read {bad} \(EIO: Input/output error\)"):
        intact_checkpoint(tmp_path)


def test_resuming_in_a_run_directory_that_cannot_be_written_says_to_make_it_writable(shared_tmp):
    """A read-only filesystem (or another owner's directory): the error told a --resume to pick a
    new run.name, which starts the run over."""
    run = RunDir.open(shared_tmp, "r", command="sft")
    run.release()
    for item in (run.path / ".lock", run.path / "run.json", run.path):
        item.chmod(0o555)
    with pytest.raises(RunDirError) as err:
        _unprivileged(lambda: RunDir.open(shared_tmp, "r", resume=True, command="sft"))
    said = str(err.value)
    assert said.startswith(f"--resume: cannot use the run directory {run.path} (Permission denied)")
    assert "make it writable" in said and "resume again" in said and "new name" not in said

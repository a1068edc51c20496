"""A full disk while the run directory is made: the run an --overwrite set aside comes back, no
half-made directory is left, and the error says to free space (not to pick another name)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from rlxf.run_dir import RunDir, RunDirError


@pytest.mark.parametrize("overwrite", [True, False])
def test_a_full_disk_while_the_run_directory_is_made_leaves_the_old_run_in_place(tmp_path, monkeypatch, overwrite):
    if overwrite:   # an earlier run of that name, which --overwrite sets aside first
        old = RunDir.open(tmp_path, "r", command="train")
        old.config.write_text("x: 1\n")
        old.metrics.write_text('{"step": 1}\n')
        old.release()
    real = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == "run.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(RunDirError, match=f"No space left on device.*Free space on {tmp_path}"):
        RunDir.open(tmp_path, "r", overwrite=overwrite, command="train")
    monkeypatch.undo()
    if overwrite:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]   # no .r.replaced-<pid> hiding it
        assert (tmp_path / "r" / "metrics.jsonl").read_text() == '{"step": 1}\n'
        RunDir.open(tmp_path, "r", resume=True, command="train").release()   # and it resumes in this process
    else:
        assert list(tmp_path.iterdir()) == []

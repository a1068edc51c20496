"""A progress line must never be what stops a run: not when its reader went away (``rlxf train
... 2>&1 | head``, a killed ``tee``), nor when the terminal hung up."""

from __future__ import annotations

import errno
import logging
import sys

import pytest

from rlxf.metrics.progress import ProgressDisplay


class _GoneReader:
    """stderr whose reader is gone: every write fails with ``error``."""

    def __init__(self, error: OSError):
        self.error, self.writes = error, 0

    def write(self, text):
        self.writes += 1
        raise self.error

    def flush(self):
        pass

    def isatty(self):
        return False


@pytest.mark.parametrize("error", [BrokenPipeError(errno.EPIPE, "Broken pipe"), OSError(errno.EIO, "I/O error")])
def test_a_progress_line_nobody_reads_does_not_end_the_run(tmp_path, monkeypatch, caplog, error):
    stderr = _GoneReader(error)
    monkeypatch.setattr(sys, "stderr", stderr)
    # only the display writes there: a handler an earlier test left on the rlxf or root logger
    # (one that writes to sys.stderr as it is now: Ray's, rich's) would count the warning below too
    monkeypatch.setattr(logging.getLogger(), "handlers", [caplog.handler])
    monkeypatch.setattr(logging.getLogger("rlxf"), "handlers", [])
    monkeypatch.setattr(logging.getLogger("rlxf"), "propagate", True)
    # rich's answer to a broken pipe is SystemExit(1), after pointing stdout at /dev/null: a file here
    with open(tmp_path / "stdout", "w") as stdout, ProgressDisplay(5, enabled=False) as progress:
        monkeypatch.setattr(sys, "stdout", stdout)
        for step in range(1, 6):
            progress.update(step, {"reward/mean": 0.5})
    assert stderr.writes == 1                     # silent after the first failure, not failing at every step
    said = [r.getMessage() for r in caplog.records if "progress display" in r.getMessage()]
    assert len(said) == (0 if isinstance(error, BrokenPipeError) else 1)

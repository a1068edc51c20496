"""Stop a run cleanly on SIGTERM / SIGINT: finish the step, checkpoint it, then exit.

A scheduler's SIGTERM or a first Ctrl-C only asks the loop to stop: the step in progress
completes, a checkpoint is written, and ``TrainingInterrupted`` tells the caller where it is
(the CLI prints the ``--resume`` command and exits 128 + signal); in the run's last step
there is nothing left to resume, so the run ends as finished. A second Ctrl-C stops at
once (``KeyboardInterrupt``), the way a user expects when the current step takes too long.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

log = logging.getLogger("rlxf")


class TrainingInterrupted(Exception):
    """The run stopped on a signal after saving ``checkpoint`` (step ``step``)."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        name = signal.Signals(signum).name
        where = f"checkpoint {checkpoint}" if checkpoint is not None else "no checkpoint (no step had finished)"
        super().__init__(f"stopped by {name} after step {step}; {where}")

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum


class StopRequest:
    """Context manager: while active, SIGTERM and SIGINT set ``signum`` instead of killing the
    process. Outside the main thread (where Python cannot install handlers) it does nothing."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, without a checkpoint
        self.signum = signum
        log.warning("%s received: stopping after this step and saving a checkpoint "
                    "(press Ctrl-C again to stop at once, without one)", signal.Signals(signum).name)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()


__all__ = ["StopRequest", "TrainingInterrupted"]

"""StopRequest: SIGTERM / a first Ctrl-C ask the loop to stop; a second Ctrl-C stops at once."""

from __future__ import annotations

import signal
import threading

import pytest

from rlxf.trainer.interrupt import StopRequest, TrainingInterrupted


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_is_recorded_not_fatal_and_handlers_are_restored(signum):
    before = signal.getsignal(signum)
    with StopRequest() as stop:
        assert stop.signum is None
        signal.pthread_kill(threading.get_ident(), signum)  # to this thread: handled at once
        assert stop.signum == signum
    assert signal.getsignal(signum) is before


def test_a_second_ctrl_c_stops_at_once():
    with StopRequest() as stop, pytest.raises(KeyboardInterrupt):
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        assert stop.signum == signal.SIGINT
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)


def test_exit_code_is_128_plus_the_signal():
    assert TrainingInterrupted(signal.SIGINT, 3, None).exit_code == 130
    assert TrainingInterrupted(signal.SIGTERM, 3, None).exit_code == 143
    assert "after step 3" in str(TrainingInterrupted(signal.SIGTERM, 3, None))

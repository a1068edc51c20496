"""The engine process shared by several threads, with restarts (async mode with ``env:``): an
engine restarted by an episode thread outlives that thread, and weights sent while another
thread restarts the engine are written only once the new engine has read the buffer.

The engine here is ``serve`` in miniature, forked (no model, no spawn: milliseconds): it arms
the death signal as ``serve`` does and answers every request with no completions."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from rlxf.rollout.base import SamplingParams

SAMPLING = SamplingParams(n=1, max_new_tokens=2)


@pytest.fixture
def engine(forked_engine):
    return forked_engine()   # conftest's answering_serve


def _kill(engine) -> None:
    engine._proc.kill()
    engine._proc.join()


@pytest.mark.skipif(sys.platform != "linux", reason="the death signal (PR_SET_PDEATHSIG) is Linux's")
def test_an_engine_restarted_by_a_thread_that_ends_lives_on(engine):
    """The kernel kills a process when the thread that started it exits. The engine restarted by
    an episode thread was so killed as soon as that thread's episodes were done, and the next
    call restarted it again (one restart more per episode thread, until max_restarts ran out)."""
    assert engine.generate([[1, 2]], SAMPLING) == [[]]
    _kill(engine)
    episodes = threading.Thread(target=engine.generate, args=([[1, 2]], SAMPLING))  # finds it dead: restarts it
    episodes.start()
    episodes.join()
    while os.path.exists(f"/proc/self/task/{episodes.native_id}"):   # join returns before the OS thread ends
        time.sleep(0.01)
    assert engine.restarts == 1
    assert engine.generate([[1, 2]], SAMPLING) == [[]]
    assert engine.restarts == 1


def test_weights_wait_for_an_engine_restarted_by_another_thread(engine):
    """A restart in another thread between ``update_weights``'s wait and its write starts an engine
    that reads the shared buffer as it loads: the write must wait until it has (before, it wrote
    at once, into the buffer the new engine was copying)."""
    wait = engine._wait
    calls = []

    def wait_then_restart_elsewhere(done, timeout=None):
        ok = wait(done, timeout)
        if not calls:   # what another thread, finding the engine dead, does meanwhile
            with engine._cond:
                _kill(engine)
                engine._take_in(None)
        calls.append(ok)
        return ok

    engine._wait = wait_then_restart_elsewhere
    loaded_at_write = []

    def weights():
        loaded_at_write.append(engine._loaded)
        yield from ()

    engine.update_weights(weights(), version=1)
    assert engine.restarts == 1
    assert loaded_at_write == [0]   # the new engine had loaded version 0 from the buffer first
    assert engine.generate([[1]], SAMPLING) == [[]]

"""The async engine process under a run's signals and restarts: a SIGTERM to the whole process
group (a scheduler stopping the job) leaves the engine to the trainer, which finishes its step
with it and closes it; the engine's idle time is a running total across restarts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

from rlxf.rollout import process

# ``serve`` with a fake engine; commands come from stdin, messages go to stdout
SERVER = textwrap.dedent("""
    import os, queue, sys, threading
    from rlxf.rollout import process

    class Engine:
        name = "native"
        def update_weights(self, weights, version):
            pass

    class Recipe:
        def build(self):
            return Engine()

    class Pipe:
        def send(self, message):
            print(message[0], flush=True)
        def close(self):
            pass

    commands = queue.Queue()
    def feed():
        for line in sys.stdin:
            commands.put((line.strip(),))
    threading.Thread(target=feed, daemon=True).start()
    process.serve(Recipe(), {}, 0, commands, Pipe(), os.getppid())
    print("closed", flush=True)
""")


def test_the_engine_outlives_a_sigterm_and_closes_when_told(tmp_path):
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert server.stdout.readline().strip() == "loaded"  # its signal handlers are in place
        server.send_signal(signal.SIGTERM)
        server.send_signal(signal.SIGINT)
        server.stdin.write("close\n")
        server.stdin.flush()
        out, _ = server.communicate(timeout=30)
    finally:
        server.kill()
    assert server.returncode == 0, f"the engine died of a signal (exit code {server.returncode})"
    assert out.splitlines()[-1] == "closed"


class _Connection:
    """The trainer's end of the pipe, with nothing in it."""

    def poll(self, timeout=0):
        return False

    def close(self):
        pass


class _Process:
    exitcode = -9

    def is_alive(self):
        return True


class _Commands:
    def cancel_join_thread(self):
        pass

    def close(self):
        pass


def test_idle_seconds_keep_counting_across_an_engine_restart(monkeypatch):
    """The dead engine waited 2 s (as of its last message); the new one has waited 0.5 s: 2.5 s in
    all. (Before, the total fell back to the new process's 0.5 s, and a step's idle fraction,
    a difference of totals, read 0.)"""
    engine = process.EngineProcess.__new__(process.EngineProcess)
    engine.max_restarts, engine.restarts, engine._inflight, engine._done, engine._awaited = 3, 0, {}, {}, set()
    engine._cond, engine._reading, engine._failed, engine._closed = threading.Condition(), False, None, False
    engine._proc, engine._results, engine._commands = _Process(), _Connection(), _Commands()
    engine._idle_s, engine._idle_since, engine._idle_before = 2.0, None, 0.0
    monkeypatch.setattr(engine, "_start", lambda: None)
    assert engine.idle_seconds() == 2.0
    engine._restart()
    engine._receive(("idle", 0.5, None))
    assert engine.restarts == 1
    assert engine.idle_seconds() == 2.5

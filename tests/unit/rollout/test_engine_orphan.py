"""The engine process dies with its trainer: a trainer killed with SIGKILL (no ``close``, no
atexit) leaves no engine behind holding the model (and on a GPU its KV cache)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rlxf.rollout import process

# A trainer in miniature: starts an engine the way the async loop does, waits until it answers,
# prints its pid, then sleeps until killed.
TRAINER = textwrap.dedent("""
    import sys, time
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from rlxf.config.rollout import RolloutConfig
    from rlxf.rollout.base import SamplingParams
    from rlxf.rollout.process import EngineProcess, EngineRecipe

    if __name__ == "__main__":
        torch.set_num_threads(1)
        model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
        tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
        rollout = RolloutConfig(mode="async", n=1, max_new_tokens=2)
        engine = EngineProcess(EngineRecipe.of(model, tokenizer, rollout, seed=0), model.named_parameters())
        engine.generate([[1, 2, 3]], SamplingParams(n=1, max_new_tokens=2))
        print(engine._proc.pid, flush=True)
        time.sleep(600)
""")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a parent that does not reap it has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def test_the_engine_process_exits_when_its_trainer_is_killed(tmp_path, nano_model_dir):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    trainer = subprocess.Popen([sys.executable, str(script), str(nano_model_dir)], stdout=subprocess.PIPE,
                               text=True, env=env)
    engine = None
    try:
        line = trainer.stdout.readline()
        assert line.strip().isdigit(), f"the trainer printed no engine pid (exit code {trainer.poll()})"
        engine = int(line)
        assert _alive(engine)
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _alive(engine) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(engine), "the engine process outlived its killed trainer"
    finally:
        trainer.kill()
        trainer.wait()
        if engine is not None and _alive(engine):
            os.kill(engine, signal.SIGKILL)


class _Idle:
    name = "native"


class _Outbox(list):
    put = list.append


def test_an_idle_engine_notices_its_parent_is_gone_without_a_death_signal(monkeypatch):
    """The portable check (no prctl): waiting for commands, the server looks at its parent pid."""
    monkeypatch.setattr(process, "PARENT_POLL_S", 0.05)
    server = process._Server(_Idle(), {}, queue.Queue(), _Outbox(), parent=os.getpid())  # not its parent
    t0 = time.monotonic()
    with pytest.raises(process._Orphaned):
        server.run()
    assert time.monotonic() - t0 < 2


def test_an_engine_whose_parent_is_alive_keeps_waiting(monkeypatch):
    monkeypatch.setattr(process, "PARENT_POLL_S", 0.05)
    commands = queue.Queue()
    server = process._Server(_Idle(), {}, commands, _Outbox(), parent=os.getppid())
    late = threading.Timer(0.5, commands.put, args=[("weights", 3)])  # after several checks
    late.start()
    assert server._next_command() == ("weights", 3)

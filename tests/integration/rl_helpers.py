"""Configs and runners shared by the RL integration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import yaml

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def write_config(tmp_path: Path, model_dir: Path, **sections) -> Path:
    """A small GRPO config on the nano model, `sections` merged over the defaults."""
    cfg = {
        "run": {"name": "t", "output_dir": str(tmp_path / "runs"), "seed": 0},
        "model": {"path": str(model_dir)},
        "data": {"task": "arithmetic", "task_options": {"max_digits": 2, "ops": "+"},
                 "train_size": 500, "test_size": 16, "max_prompt_len": 64},
        "rollout": {"n": 4, "max_new_tokens": 8},
        "reward": {"verifiers": [{"type": "custom", "name": "upper", "function": "rl_plugins:upper_fraction"}]},
        "train": {"steps": 4, "prompts_per_step": 4, "micro_batch_size": 8, "optim": {"lr": 3e-3}},
        "eval": {"every": 0, "num_problems": 8},
        "checkpoint": {"every": 2},
        "logging": {"progress": False},
    }
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values} if isinstance(values, dict) else values
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def rlxf_subprocess(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh Python process (so "the process exited" is real)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "rlxf.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def signal_after_first(real, signum=signal.SIGTERM):
    """``real`` that sends ``signum`` to this thread once its first call has returned: a
    scheduler's SIGTERM landing while a run evaluates its start, at a known moment."""
    calls = []

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        if not calls:
            calls.append(1)
            signal.pthread_kill(threading.get_ident(), signum)
        return out
    return wrapped


@contextmanager
def caught_outside(signum=signal.SIGTERM):
    """A handler for ``signum`` inside the block, so that a run which does not install its own
    fails the test instead of ending pytest; yields the list of what it caught, and puts the
    handler it replaced back on leaving."""
    caught: list[int] = []
    previous = signal.signal(signum, lambda s, _: caught.append(s))
    try:
        yield caught
    finally:
        signal.signal(signum, previous)

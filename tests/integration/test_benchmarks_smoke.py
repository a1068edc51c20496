"""Each benchmark script runs at its smallest settings, so that an API change breaks the suite
rather than the next benchmark run, and names the CPU its figures came from.

Not run here (each takes well over 15 s at its smallest): async.py (two `rlxf train` processes,
~35 s), placement.py (four `rlxf train` processes, three starting Ray, ~2 min), efficacy.py and
sparse_signal.py (an SFT stage before any GRPO), placement_accuracy.py (quickstart runs to start
from, and 1000 held-out problems evaluated per placement).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlxf.models.kernel_choice import cpu_model

BENCH = Path(__file__).parents[2] / "benchmarks"

pytestmark = pytest.mark.slow


def bench(script: str, *args: str, timeout: float = 60) -> str:
    """Runs ``benchmarks/<script>`` on one thread and returns its output; fails with its stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=BENCH.parent)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    assert cpu_model() in proc.stdout, f"{script} printed figures without the CPU model:\n{proc.stdout}"
    return proc.stdout


def test_trainer_kernels():
    out = bench("trainer_kernels.py", "--presets", "nano", "--tokens", "4", "--threads", "1")
    assert "nano" in out and "auto on this machine" in out


def test_rollout_native_side():
    out = bench("rollout.py", "--presets", "nano", "--prompts", "2", "--n", "2", "--tokens", "4",
                "--min-prompt", "4", "--max-prompt", "8", "--threads", "1", "--max-batch-size", "8", "--skip-hf")
    assert "update_weights" in out


def test_grpo_step_rlxf_side_trains_every_sample(nano_model_dir, tmp_path):
    """From an untrained model every reward is 0; rlxf must still run every sample's forward and
    backward, as TRL does, or the ratio compares a step that trains with one that does not."""
    (tmp_path / "nano").symlink_to(nano_model_dir)   # --models: no init-model process
    out = bench("grpo_step.py", "--presets", "nano", "--tokens", "4", "--steps", "1", "--warmup", "1",
                "--rounds", "1", "--threads", "1", "--sides", "rlxf", "--models", str(tmp_path))
    assert "| nano | 4 |" in out
    assert "'rows_run_frac': 1.0" in out


def test_rewards():
    if not (BENCH.parent / ".git").exists():
        pytest.skip("the code benchmark's baseline sandbox comes from git archive")
    out = bench("rewards.py", "--math", "4", "--code", "2", "--flips", "0")
    assert "current / baseline" in out


def test_signal_rows(nano_model_dir, tmp_path):
    out = bench("signal_rows.py", "--model", str(nano_model_dir), "--tasks", "gcd", "--steps", "1",
                "--rounds", "1", "--threads", "1", "--out", str(tmp_path))
    assert "gcd: samples run" in out

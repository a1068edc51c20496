"""rollout.mode=async end to end on the nano model: the engine in its own process, k = 0 equal
to sync bit for bit, and an engine killed mid-run replaced without losing the run."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

from rl_helpers import metrics, write_config
from safetensors.torch import load_file

from rlxf.cli.main import main

COMPARED = ("reward/mean", "reward/std", "policy/loss", "grad_norm", "entropy", "advantage/abs_mean",
            "response/length_mean", "eval/accuracy", "eval/reward_mean", "samples", "sampling/kept_frac")


def test_async_with_k0_is_sync_bit_for_bit(tmp_path, nano_model_dir):
    """With the quickstart's dynamic sampling (one round: groups whose rewards agree are not
    trained on, none refilled), so both the kept and the left-out path are compared."""
    runs = {}
    for mode in ("sync", "async"):
        cfg = write_config(tmp_path / mode, nano_model_dir, run={"name": mode, "output_dir": str(tmp_path / "runs")},
                           train={"steps": 3}, eval={"every": 3, "num_problems": 4}, checkpoint={"every": 0},
                           algorithm={"dynamic_sampling": True, "max_sampling_rounds": 1},
                           reward={"verifiers": [{"type": "custom", "name": "odd", "function": "rl_plugins:odd_length"}]})
        assert main(["train", str(cfg), f"rollout.mode={mode}", "rollout.max_staleness=0"]) == 0
        runs[mode] = tmp_path / "runs" / mode
    sync, asyn = metrics(runs["sync"]), metrics(runs["async"])
    assert len(sync) == len(asyn) == 3
    for a, b in zip(sync, asyn):
        assert {k: a.get(k) for k in COMPARED} == {k: b.get(k) for k in COMPARED}
        assert b["async/staleness_max"] == 0 and b["async/dropped_stale"] == 0
    assert "eval/accuracy" in sync[-1]
    assert any(0 < r["samples"] < 16 for r in sync)  # some groups left out, some kept: both paths compared
    a = load_file(runs["sync"] / "checkpoints/step_3/model/model.safetensors")
    b = load_file(runs["async"] / "checkpoints/step_3/model/model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def _kill_engine_after_first_step(run_dir, killed: list[int]) -> None:
    """Watch the run; once step 1 is logged, SIGKILL the engine process (its requests for the
    next steps are in flight: k = 1 keeps the engine a step ahead)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").read_text().strip():
            for child in multiprocessing.active_children():
                if child.name == "rlxf-engine":
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
            return
        time.sleep(0.05)


def test_a_killed_engine_process_is_restarted_and_its_requests_retried(tmp_path, nano_model_dir):
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 4}, checkpoint={"every": 0})
    run = tmp_path / "runs" / "t"
    killed: list[int] = []
    watcher = threading.Thread(target=_kill_engine_after_first_step, args=(run, killed), daemon=True)
    watcher.start()
    assert main(["train", str(cfg), "rollout.mode=async", "rollout.max_staleness=1"]) == 0
    watcher.join()
    assert killed, "the engine process was never seen"
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["async/engine_restarts"] == 1.0
    assert all(r["async/staleness_max"] <= 1 for r in rows)

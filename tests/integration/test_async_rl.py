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

NOT_COMPARED = ("time/", "throughput/", "async/")   # clocks, and the metrics only async logs

ODD = {"verifiers": [{"type": "custom", "name": "odd", "function": "rl_plugins:odd_length"}]}
# two sources 3:1, so the mixture's draw order is compared too
MIXTURE = {"task": None, "train_size": 500, "test_size": 16,
           "sources": [{"name": "add", "task": "arithmetic", "task_options": {"max_digits": 2, "ops": "+"},
                        "train_size": 300, "test_size": 8, "weight": 3},
                       {"name": "sub", "task": "arithmetic", "task_options": {"max_digits": 2, "ops": "-"},
                        "train_size": 300, "test_size": 8, "weight": 1}]}


def _same(a: dict, b: dict) -> bool:
    keep = lambda m: {k: v for k, v in m.items() if not k.startswith(NOT_COMPARED)}  # noqa: E731
    return keep(a) == keep(b)


def _weights(run, step: int) -> dict:
    return load_file(run / f"checkpoints/step_{step}/model/model.safetensors")


def _runs(tmp_path, nano_model_dir, algorithm: dict | None = None, **sections) -> dict:
    """sync, async k = 0, and async k = 0 stopped after step 2 then resumed, 3 steps each."""
    runs = {}
    for name, mode, steps in (("sync", "sync", 3), ("async", "async", 3), ("split", "async", 2)):
        cfg = write_config(tmp_path / name, nano_model_dir, run={"name": name, "output_dir": str(tmp_path / "runs")},
                           train={"steps": 3}, eval={"every": 2, "num_problems": 4}, checkpoint={"every": 0},
                           rollout={"n": 2, "max_new_tokens": 8},
                           algorithm={"dynamic_sampling": True, "max_sampling_rounds": 3, **(algorithm or {})},
                           reward=ODD, **sections)
        args = [f"rollout.mode={mode}", "rollout.max_staleness=0"]
        assert main(["train", str(cfg), *args, f"train.steps={steps}"]) == 0
        if name == "split":
            assert main(["train", str(cfg), "--resume", *args]) == 0
        runs[name] = tmp_path / "runs" / name
    return runs


def test_async_with_k0_is_sync_bit_for_bit_over_sampling_rounds_and_a_resume(tmp_path, nano_model_dir):
    """DAPO's dynamic sampling over three rounds (groups of 2 agree half the time: some are
    refilled, some rounds run out and leave groups out) on a 3:1 mixture: async k = 0 draws the
    same prompts in the same order with the same seeds as sync, keeps the same groups, and
    leaves the same weights; resumed after step 2 it repeats itself."""
    runs = _runs(tmp_path, nano_model_dir, data=MIXTURE)
    sync, asyn, split = (metrics(runs[name]) for name in ("sync", "async", "split"))
    assert [r["step"] for r in sync] == [r["step"] for r in asyn] == [r["step"] for r in split] == [1, 2, 3]
    for a, b, c in zip(sync, asyn, split):
        assert _same(a, b) and _same(b, c)
        assert b["async/staleness_max"] == 0 and b["async/dropped_stale"] == 0
    assert "eval/add/accuracy" in sync[-1]
    # the paths compared: refills (more prompts drawn than a step's 4), a third round, and
    # groups left out when the rounds ran out (fewer than 4 x 2 samples trained on)
    assert any(r["sampling/prompts_drawn"] > 4 for r in sync) and any(r["sampling/rounds"] == 3 for r in sync)
    assert any(r["samples"] < 8 for r in sync)
    a, b, c = (_weights(runs[name], 3) for name in ("sync", "async", "split"))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) and b[k].equal(c[k]) for k in a)


def test_async_with_k0_is_sync_bit_for_bit_with_a_critic(tmp_path, nano_model_dir):
    """PPO: the critic's values and GAE advantages, over the same rounds."""
    runs = _runs(tmp_path, nano_model_dir, algorithm={"name": "ppo"})
    sync, asyn, split = (metrics(runs[name]) for name in ("sync", "async", "split"))
    assert len(sync) == len(asyn) == len(split) == 3
    assert all(_same(a, b) and _same(b, c) for a, b, c in zip(sync, asyn, split))
    assert "critic/loss" in sync[-1]
    a, b, c = (_weights(runs[name], 3) for name in ("sync", "async", "split"))
    assert all(a[k].equal(b[k]) and b[k].equal(c[k]) for k in a)


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

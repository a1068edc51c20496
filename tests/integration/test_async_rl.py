"""rollout.mode=async end to end on the nano model: the engine in its own process, k = 0 equal
to sync bit for bit (dynamic sampling's rounds, a mixture, a critic, a resume), an engine
killed mid-run replaced without losing the run, and a resume that loses no prompt in flight."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time

import torch
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


def _weights(run, step: int, model: str = "model") -> dict:
    return load_file(run / f"checkpoints/step_{step}/{model}/model.safetensors")


def _runs(tmp_path, nano_model_dir, names: tuple[str, ...], algorithm: dict | None = None, **sections) -> dict:
    """3 steps of ``sync``, of ``async`` k = 0, and of ``split``: async k = 0 stopped after
    step 2 (a checkpoint), then resumed. Dynamic sampling over three rounds, groups of 2."""
    runs = {}
    for name in names:  # a constant lr: the split run is 2 steps long first (a cosine one is laid over the length)
        cfg = write_config(tmp_path / name, nano_model_dir, run={"name": name, "output_dir": str(tmp_path / "runs")},
                           train={"steps": 3, "optim": {"schedule": "constant"}}, eval={"every": 2, "num_problems": 4}, checkpoint={"every": 0},
                           rollout={"n": 2, "max_new_tokens": 8},
                           algorithm={"dynamic_sampling": True, "max_sampling_rounds": 3, **(algorithm or {})},
                           reward=ODD, **sections)
        args = ["rollout.mode=sync" if name == "sync" else "rollout.mode=async", "rollout.max_staleness=0"]
        if name == "split":
            assert main(["train", str(cfg), *args, "train.steps=2"]) == 0
            assert main(["train", str(cfg), "--resume", *args]) == 0
        else:
            assert main(["train", str(cfg), *args]) == 0
        runs[name] = metrics(tmp_path / "runs" / name), tmp_path / "runs" / name
    return runs


def test_async_with_k0_is_sync_bit_for_bit_over_sampling_rounds_and_a_resume(tmp_path, nano_model_dir):
    """DAPO's dynamic sampling over three rounds (groups of 2 agree half the time: some are
    replaced, some rounds run out and leave groups out) on a 3:1 mixture: async k = 0 draws the
    same prompts in the same order with the same seeds as sync, keeps the same groups, and
    leaves the same weights; resumed after step 2 it repeats itself."""
    runs = _runs(tmp_path, nano_model_dir, ("sync", "async", "split"), data=MIXTURE)
    (sync, a), (asyn, b), (split, c) = runs["sync"], runs["async"], runs["split"]
    assert [r["step"] for r in sync] == [r["step"] for r in asyn] == [r["step"] for r in split] == [1, 2, 3]
    for x, y, z in zip(sync, asyn, split):
        assert _same(x, y) and _same(y, z)
        assert y["async/staleness_max"] == 0 and y["async/dropped_stale"] == 0
    assert "eval/add/accuracy" in sync[-1]
    # the paths compared: replacements (more prompts drawn than a step's 4), a third round, and
    # groups left out when the rounds ran out (fewer than 4 x 2 samples trained on)
    assert any(r["sampling/prompts_drawn"] > 4 for r in sync) and any(r["sampling/rounds"] == 3 for r in sync)
    assert any(r["samples"] < 8 for r in sync)
    a, b, c = (_weights(run, 3) for run in (a, b, c))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) and b[k].equal(c[k]) for k in a)


def test_async_with_k0_is_sync_bit_for_bit_with_a_critic(tmp_path, nano_model_dir):
    """PPO: the critic's values and GAE advantages, over the same rounds."""
    runs = _runs(tmp_path, nano_model_dir, ("sync", "async"), algorithm={"name": "ppo"})
    (sync, a), (asyn, b) = runs["sync"], runs["async"]
    assert len(sync) == len(asyn) == 3 and all(_same(x, y) for x, y in zip(sync, asyn))
    assert "critic/loss" in sync[-1]
    for model in ("model", "critic"):
        x, y = _weights(a, 3, model), _weights(b, 3, model)
        assert x.keys() == y.keys() and all(x[k].equal(y[k]) for k in x)


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


def test_a_killed_engine_and_a_resume_lose_no_prompt(tmp_path, nano_model_dir):
    """k = 1: the engine killed after step 1 is restarted and its requests retried; the run
    stops after step 5 with the prompts of step 6 in flight, and --resume sends them again:
    no prompt is trained on twice, and each one in flight at the checkpoint is trained on after
    the resume or is still in flight at the end (none is skipped). Five steps, not three: the
    nano engine can finish the next two steps' requests before the kill lands, and the run must
    still need the engine afterwards for the restart to be seen."""
    # a constant lr: the resume adds a step, which a cosine schedule's run may not
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 5, "optim": {"schedule": "constant"}},
                       checkpoint={"every": 0}, logging={"progress": False, "samples_fraction": 1.0})
    run = tmp_path / "runs" / "t"
    killed: list[int] = []
    watcher = threading.Thread(target=_kill_engine_after_first_step, args=(run, killed), daemon=True)
    watcher.start()
    args = ["rollout.mode=async", "rollout.max_staleness=1"]
    assert main(["train", str(cfg), *args]) == 0
    watcher.join()
    assert killed, "the engine process was never seen"
    assert main(["train", str(cfg), "--resume", *args, "train.steps=6"]) == 0
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[4]["async/engine_restarts"] == 1.0  # noticed by step 5 at the latest
    assert all(r["async/staleness_max"] <= 1 for r in rows)

    def out_at(step: int) -> set[str]:
        state = torch.load(run / f"checkpoints/step_{step}/trainer_state.pt", weights_only=True)
        return {uid for _, uid, *_ in state["in_flight"]["out"]}

    groups = {(s["step"], s["group"]): s["uid"] for s in map(json.loads, (run / "samples.jsonl").read_text().splitlines())}
    trained = {step: [uid for (s, _), uid in groups.items() if s == step] for step in range(1, 7)}
    assert all(len(uids) == 4 for uids in trained.values())
    everything = sum(trained.values(), [])
    assert len(set(everything)) == len(everything)  # none twice
    assert out_at(5) and not out_at(5) & set(everything[:20])
    assert out_at(5) <= set(trained[6]) | out_at(6)


UNGUARDED_SCRIPT = """
import rlxf
def exact(sample):
    return float(sample.response.strip() == (sample.ground_truth or ""))
rlxf.train(model={model!r}, prompts=[{{"prompt": f"{{i}}+1=", "answer": str(i + 1)}} for i in range(40)],
           reward_funcs=[exact], rollout={{"n": 2, "max_new_tokens": 4, "mode": "async", "max_staleness": 1}},
           train={{"steps": 2, "prompts_per_step": 2, "micro_batch_size": 4}},
           logging={{"progress": False}}, run={{"name": "api", "output_dir": {out!r}}})
print("finished")
"""


def test_an_async_run_from_a_script_without_a_main_guard_finishes(tmp_path, nano_model_dir):
    """The README's API example has no `if __name__ == "__main__":`; the engine process is
    spawned, and spawn re-ran the script in the child, which hung the parent for ever."""
    import subprocess
    import sys

    script = tmp_path / "train_it.py"
    script.write_text(UNGUARDED_SCRIPT.format(model=str(nano_model_dir), out=str(tmp_path / "runs")))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr[-2000:]
    assert [m["step"] for m in metrics(tmp_path / "runs" / "api")] == [1, 2]


DIGITS_ENV = {"name": "agentic_plugins:DigitsEnv", "max_turns": 2, "max_total_tokens": 96, "credit": "per_turn"}


def _env_run(tmp_path, nano_model_dir, name: str, *args: str) -> tuple[list[dict], object]:
    cfg = write_config(tmp_path / name, nano_model_dir, run={"name": name, "output_dir": str(tmp_path / "runs")},
                       env=DIGITS_ENV, rollout={"n": 2, "max_new_tokens": 6},
                       train={"steps": 3, "prompts_per_step": 2, "micro_batch_size": 8},
                       eval={"every": 3, "num_problems": 2}, checkpoint={"every": 0},
                       logging={"progress": False, "samples_fraction": 1.0})
    assert main(["train", str(cfg), *args]) == 0
    return metrics(tmp_path / "runs" / name), tmp_path / "runs" / name


def test_async_episodes_with_k0_are_sync_bit_for_bit(tmp_path, nano_model_dir):
    """Multi-turn episodes (an environment, two model turns each) through the engine process:
    with k = 0 the same episodes, rewards and weights as sync mode."""
    sync, a = _env_run(tmp_path, nano_model_dir, "sync", "rollout.mode=sync")
    asyn, b = _env_run(tmp_path, nano_model_dir, "async", "rollout.mode=async", "rollout.max_staleness=0")
    assert [r["step"] for r in sync] == [r["step"] for r in asyn] == [1, 2, 3]
    assert all(_same(x, y) for x, y in zip(sync, asyn))
    assert all(r["env/episode_errors"] == 0 and r["env/end/terminated"] == 1.0 for r in asyn)
    assert "eval/accuracy" in asyn[-1]
    episodes = lambda run: [(s["uid"], s["response"], s["reward"], s["episode"]["turn_rewards"])  # noqa: E731
                            for s in map(json.loads, (run / "samples.jsonl").read_text().splitlines())]
    assert episodes(a) == episodes(b) and len(episodes(a)) == 12
    x, y = _weights(a, 3), _weights(b, 3)
    assert x.keys() == y.keys() and all(x[k].equal(y[k]) for k in x)


def test_async_episodes_with_k1_stay_within_the_staleness_bound(tmp_path, nano_model_dir):
    """k = 1: episodes run while the trainer trains; every group trained on is at most one
    version behind, every episode's model turns carry the version they were sampled under, and
    the run trains."""
    rows, run = _env_run(tmp_path, nano_model_dir, "k1", "rollout.mode=async", "rollout.max_staleness=1",
                         "train.steps=4")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["async/staleness_max"] <= 1 and r["env/episode_errors"] == 0 for r in rows)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 16 and all(s["episode"]["turns"] == 2 for s in samples)
    trained, base = _weights(run, 4), load_file(nano_model_dir / "model.safetensors")
    assert any(not torch.equal(trained[k], base[k]) for k in trained)

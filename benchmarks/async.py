"""Sync vs async RL, side by side: the quickstart's GRPO workload, rollout.mode sync and async.

    python benchmarks/async.py --model runs/quickstart/sft          # the quickstart's SFT model
    python benchmarks/async.py --model M --steps 40 --modes sync async1 async2

The workload is ``rlxf/trainer/recipes/quickstart_grpo.yaml`` (GRPO with dynamic sampling, one
round, on 3-digit additions that carry 2-3 times; 16 prompts x 8 samples, 5 new tokens, tiny
preset) started from the quickstart's SFT model, run through ``rlxf train`` in a fresh process
per mode. Threads, on this 2-core machine: ``sync`` runs torch (trainer and engine in turn) on
2 threads; ``sync-1t`` on 1 (to tell what overlap gains from what one thread per process
gains: on a loaded machine two OpenMP threads can be much slower than one); ``async<k>``
(rollout.mode=async, max_staleness=k) runs the trainer on 1 thread and the engine process on 1;
``async<k>-<correction>`` adds ``algorithm.off_policy=<correction>`` (e.g. ``async1-decoupled``).

Per mode it prints: samples per second (sampled and scored) over the steps after ``--warmup`` (step time
without evaluation), its ratio to sync, the trainer's and the engine's idle fraction (sync: the
trainer idles while it samples, the engine while it trains), groups dropped as stale, and the
greedy held-out accuracy (``--eval-problems`` hard problems) at equal steps (``--steps``) and
at equal wall time: async modes run ``--async-steps`` steps (default 1.5 x steps), evaluating
every ``--eval-every``, and the table shows their accuracy at the last evaluation reached
within sync's training time. The load average and CPU model are printed with the figures.
Prints; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "rlxf" / "trainer" / "recipes" / "quickstart_grpo.yaml"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def mode_overrides(mode: str, cpus: int) -> list[str]:
    if mode == "sync":
        return ["rollout.mode=sync", f"run.threads={cpus}"]
    if mode == "sync-1t":  # what one thread does alone: the share of any gain that is not overlap
        return ["rollout.mode=sync", "run.threads=1"]
    k, _, correction = mode.removeprefix("async").partition("-")  # async1-decoupled: with algorithm.off_policy
    return ["rollout.mode=async", f"rollout.max_staleness={int(k)}", f"run.threads={max(1, cpus - 1)}",
            *([f"algorithm.off_policy={correction}"] if correction else [])]


def run_mode(mode: str, args, out: Path, steps: int) -> tuple[list[dict], float]:
    overrides = [f"model.path={args.model}", f"run.output_dir={out}", f"run.name={mode}", f"train.steps={steps}",
                 f"eval.every={args.eval_every}", f"eval.num_problems={args.eval_problems}", "eval.at_start=false",
                 "checkpoint.every=0", "checkpoint.save_final=false", "logging.progress=false",
                 "logging.samples_fraction=0", "reward.workers=0", *mode_overrides(mode, args.cpus)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rlxf.cli.main", "train", str(RECIPE), *overrides],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / mode / "metrics.jsonl").read_text().splitlines()]
    return rows, wall


def train_seconds(row: dict) -> float:
    """The step's time without its evaluation (evaluation is the same work in every mode)."""
    return row["time/step"] - row.get("time/eval", 0.0)


def summarize(mode: str, rows: list[dict], warmup: int, equal_steps: int, n: int = 8) -> dict:
    timed = [r for r in rows if r["step"] > warmup]
    seconds = sum(train_seconds(r) for r in timed)
    # samples the engine produced: with dynamic sampling sync trains on the informative groups
    # only, async keeps the rest with zero advantage once no more refills are allowed
    samples = sum(r.get("sampling/prompts_drawn", r["samples"] / n) * n for r in timed)
    if mode.startswith("sync"):  # the trainer waits while the engine samples; the engine waits while it trains
        trainer_idle = sum(r.get("time/rollout", 0.0) for r in timed) / seconds
        engine_idle = 1.0 - trainer_idle
    else:
        trainer_idle = sum(r["async/trainer_idle_frac"] * train_seconds(r) for r in timed) / seconds
        engine_idle = sum(r.get("async/engine_idle_frac", 0.0) * train_seconds(r) for r in timed) / seconds
    elapsed, evals = 0.0, []
    for r in rows:
        elapsed += train_seconds(r)
        if "eval/accuracy" in r:
            evals.append((r["step"], elapsed, r["eval/accuracy"]))
    at_steps = next((acc for step, _, acc in evals if step == equal_steps), float("nan"))
    return {"mode": mode, "samples_per_s": samples / seconds, "trainer_idle": trainer_idle,
            "engine_idle": engine_idle, "dropped": sum(r.get("async/dropped_stale", 0.0) for r in rows),
            "staleness": sum(r.get("async/staleness_mean", 0.0) for r in timed) / len(timed),
            "evals": evals, "acc_at_steps": at_steps, "train_s": sum(train_seconds(r) for r in rows[:equal_steps])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the quickstart's SFT model (runs/quickstart/sft)")
    parser.add_argument("--modes", nargs="+", default=["sync", "sync-1t", "async1", "async2"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--async-steps", type=int, default=None, help="default: 1.5 x --steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-problems", type=int, default=200)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    async_steps = args.async_steps or (3 * args.steps) // 2
    out = args.out or Path(tempfile.mkdtemp(prefix="rlxf-async-bench-"))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    results = {}
    for mode in args.modes:
        rows, wall = run_mode(mode, args, out, args.steps if mode.startswith("sync") else async_steps)
        results[mode] = summarize(mode, rows, args.warmup, args.steps)
        print(f"  {mode}: {len(rows)} steps in {wall:.0f}s wall (start-up included); "
              f"load average now {os.getloadavg()}", flush=True)
    base = results.get("sync")
    print(f"\nquickstart GRPO ({RECIPE.name}), {args.steps} steps (async: {async_steps}), warmup {args.warmup}, "
          f"held-out: {args.eval_problems} hard problems, greedy")
    print(f"{'mode':8} {'samples/s':>10} {'vs sync':>8} {'trainer idle':>13} {'engine idle':>12} "
          f"{'staleness':>9} {'dropped':>8} {'acc@' + str(args.steps):>8} {'acc@sync time':>14}")
    for mode, r in results.items():
        ratio = r["samples_per_s"] / base["samples_per_s"] if base else float("nan")
        budget = base["train_s"] if base else float("inf")
        within = [acc for _, elapsed, acc in r["evals"] if elapsed <= budget * 1.02]
        at_time = f"{within[-1]:.3f}" if within else "-"
        print(f"{mode:8} {r['samples_per_s']:10.1f} {ratio:7.2f}x {100 * r['trainer_idle']:12.1f}% "
              f"{100 * r['engine_idle']:11.1f}% {r['staleness']:9.2f} {r['dropped']:8.0f} {r['acc_at_steps']:8.3f} "
              f"{at_time:>14}")
    for mode, r in results.items():
        print(f"  {mode} evaluations (step, training seconds, accuracy): "
              + ", ".join(f"({s}, {e:.0f}s, {a:.3f})" for s, e, a in r["evals"]))
    print(f"load average after: {os.getloadavg()}; runs in {out}")


if __name__ == "__main__":
    main()

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
``async<k>-<correction>`` sets ``algorithm.off_policy=<correction>`` (e.g. ``async1-decoupled``;
``async1-none`` trains on stale samples as if fresh: with k >= 1 the default is ``tis``).

Per mode it prints: samples per second (sampled and scored) over the steps after ``--warmup`` (step time
without evaluation), its ratio to sync, the trainer's and the engine's idle fraction (sync: the
trainer idles while it samples, the engine while it trains), groups dropped as stale, and the
greedy held-out accuracy (``--eval-problems`` hard problems) at equal steps (``--steps``) and
at equal wall time: async modes run ``--async-steps`` steps (default 1.5 x steps), evaluating
every ``--eval-every``, and the table shows their accuracy at the last evaluation reached
within sync's training time. ``--seeds 0 1 2`` repeats every mode on each seed (``run.seed``)
and prints the mean and standard deviation over seeds: accuracy "within seed noise" is read
against sync's own spread. With ``sync`` and ``sync-1t`` both run, it also prints what overlap
can gain at best on this machine: sync's step (rollout + train on 2 threads) over the longer
of the two on 1 thread each (an engine and a trainer that never slow each other down).
The load average and CPU model are printed with the figures. Prints; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def run_mode(mode: str, args, out: Path, steps: int, seed: int) -> tuple[list[dict], float]:
    name = f"{mode}-s{seed}"
    overrides = [f"model.path={args.model}", f"run.output_dir={out}", f"run.name={name}", f"run.seed={seed}",
                 f"train.steps={steps}",
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
    rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
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
    rollout = sum(r.get("time/rollout", 0.0) for r in timed) / len(timed) if mode.startswith("sync") else None
    return {"mode": mode, "samples_per_s": samples / seconds, "trainer_idle": trainer_idle,
            "rollout_s": rollout, "step_s": seconds / len(timed),
            "engine_idle": engine_idle, "dropped": sum(r.get("async/dropped_stale", 0.0) for r in rows),
            "staleness": sum(r.get("async/staleness_mean", 0.0) for r in timed) / len(timed),
            "evals": evals, "acc_at_steps": at_steps, "train_s": sum(train_seconds(r) for r in rows[:equal_steps])}


def mean_sd(values: list[float]) -> str:
    finite = [v for v in values if v == v]
    if not finite:
        return "-"
    if len(finite) == 1:
        return f"{finite[0]:.3f}"
    return f"{statistics.mean(finite):.3f} ± {statistics.stdev(finite):.3f}"


def overlap_bound(results: dict[str, list[dict]]) -> str | None:
    """What overlap can reach at best: sync's step over max(rollout, train) on one thread each."""
    if "sync" not in results or "sync-1t" not in results:
        return None
    two, one = results["sync"], results["sync-1t"]  # medians over seeds: one slowed run does not move them
    step2 = statistics.median(r["step_s"] for r in two)
    rollout1 = statistics.median(r["rollout_s"] for r in one)
    train1 = statistics.median(r["step_s"] - r["rollout_s"] for r in one)
    return (f"overlap's best case here: sync step {step2:.3f}s on 2 threads; on 1 thread rollout {rollout1:.3f}s, "
            f"train {train1:.3f}s -> async <= {step2 / max(rollout1, train1):.2f}x sync")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the quickstart's SFT model (runs/quickstart/sft)")
    parser.add_argument("--modes", nargs="+", default=["sync", "sync-1t", "async1", "async2"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="run.seed of each repeat of every mode")
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
    results: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    for seed in args.seeds:  # seeds outermost: a change in load hits every mode alike
        for mode in args.modes:
            rows, wall = run_mode(mode, args, out, args.steps if mode.startswith("sync") else async_steps, seed)
            results[mode].append(summarize(mode, rows, args.warmup, args.steps))
            print(f"  {mode} seed {seed}: {len(rows)} steps in {wall:.0f}s wall (start-up included); "
                  f"load average now {os.getloadavg()}", flush=True)
    base = statistics.mean(r["samples_per_s"] for r in results["sync"]) if "sync" in results else None
    budget = statistics.mean(r["train_s"] for r in results["sync"]) if "sync" in results else float("inf")
    print(f"\nquickstart GRPO ({RECIPE.name}), {args.steps} steps (async: {async_steps}), warmup {args.warmup}, "
          f"held-out: {args.eval_problems} hard problems, greedy; seeds {args.seeds} (mean ± sd)")
    print(f"{'mode':17} {'samples/s':>10} {'vs sync':>8} {'trainer idle':>13} {'engine idle':>12} "
          f"{'staleness':>9} {'dropped':>8} {'acc@' + str(args.steps):>14} {'acc@sync time':>14}")
    for mode, runs in results.items():
        speed = statistics.mean(r["samples_per_s"] for r in runs)
        ratio = speed / base if base else float("nan")
        at_time = []
        for r in runs:
            within = [acc for _, elapsed, acc in r["evals"] if elapsed <= budget * 1.02]
            at_time.append(within[-1] if within else float("nan"))
        avg = {key: statistics.mean(r[key] for r in runs)
               for key in ("trainer_idle", "engine_idle", "staleness", "dropped")}
        print(f"{mode:17} {speed:10.1f} {ratio:7.2f}x {100 * avg['trainer_idle']:12.1f}% "
              f"{100 * avg['engine_idle']:11.1f}% {avg['staleness']:9.2f} {avg['dropped']:8.0f} "
              f"{mean_sd([r['acc_at_steps'] for r in runs]):>14} {mean_sd(at_time):>14}")
    for mode, runs in results.items():
        for seed, r in zip(args.seeds, runs):
            print(f"  {mode} seed {seed}: {r['samples_per_s']:.1f} samples/s; evaluations (step, training seconds, "
                  "accuracy): " + ", ".join(f"({s}, {e:.0f}s, {a:.3f})" for s, e, a in r["evals"]))
    if (bound := overlap_bound(results)) is not None:
        print(bound)
    print(f"load average after: {os.getloadavg()}; runs in {out}")


if __name__ == "__main__":
    main()

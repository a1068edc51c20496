"""RL step time under each placement, side by side: local, ray colocated, ray disaggregated.

    pip install 'rlxf[ray]'
    python benchmarks/placement.py                         # small preset, 128 new tokens
    python benchmarks/placement.py --preset tiny --tokens 32 --steps 4

The workload is grpo_step.py's (arithmetic prompts, 8 prompts x 8 samples, GRPO, one optimizer
step per RL step, fp32, no KL), run through ``rlxf train`` in a fresh process per placement, so
each pays its own start-up. Threads: ``local`` runs torch on ``--cpus`` threads; the colocated
actor reserves ``--cpus`` CPUs (and as many threads); disaggregated splits them, one for the
learner and the rest for one engine actor (on 2 cores, 1 + 1: the learner and the engine then
overlap nothing, since the loop is synchronous, so each phase runs on half the machine).

Two more rows: disaggregated with the weights broadcast over a gloo group instead of the object
store (``ray.weight_sync=collective``), and colocated with ``--learners`` data-parallel learner
ranks sharing the same CPUs (DDP; on 2 cores each rank gets one, and rank 0 also generates, so
this shows the ranks' communication cost, not a speed-up: rollout runs on one rank's CPUs).

Per placement it prints the mean step time over the steps after ``--warmup``, its ratio to
local, the phase split from metrics.jsonl, and Ray's own overhead per step: the step time
minus local's, with the weight sync (object store put + every engine's copy) shown on its own.
Start-up (process start to the first step's end) is printed separately. Prints; never asserts.
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

import yaml
from common import cpu_model

PHASES = ("rollout", "reward", "experience", "train", "sync")


def config(args, out: Path, model: Path) -> Path:
    cfg = {
        "run": {"name": "bench", "output_dir": str(out), "seed": 0, "threads": args.cpus},
        "model": {"path": str(model), "dtype": "float32", "device": "cpu", "gradient_checkpointing": False},
        "data": {"task": "arithmetic", "task_options": {"max_digits": 2, "ops": "+"}, "train_size": 2000,
                 "test_size": 8, "apply_chat_template": True},
        "rollout": {"n": 8, "temperature": 1.0, "max_new_tokens": args.tokens},
        "reward": {"verifiers": [{"type": "numeric", "name": "correct", "extract": ["last_number"]}], "workers": 0},
        "algorithm": {"name": "grpo", "kl_coef": 0.0},
        "train": {"steps": args.warmup + args.steps, "prompts_per_step": 8, "micro_batch_size": 8,
                  # grpo_step.py's workload trains every sample each step: from an untrained model all
                  # rewards are 0, and by default rlxf would skip every row and every optimizer step
                  "optim": {"lr": 1e-5, "warmup_steps": 0, "schedule": "constant", "skip_zero_grad_steps": False}},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "save_final": False},
        "logging": {"progress": False, "samples_fraction": 0.0},
    }
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(name: str, cfg: Path, overrides: list[str], args) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rlxf.cli.main", "train", str(cfg), f"run.name={name}", *overrides],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (cfg.parent / name / "metrics.jsonl").read_text().splitlines() if line]
    timed = [r for r in rows if r["step"] > args.warmup]
    steps = sum(r["time/step"] for r in rows)
    return {"step": statistics.mean(r["time/step"] for r in timed),
            **{p: statistics.mean(r.get(f"time/{p}", 0.0) for r in timed) for p in PHASES},
            "startup": wall - steps + rows[0]["time/step"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per placement")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--learners", type=int, default=2, help="learner ranks of the data-parallel row (1: no row)")
    args = ap.parse_args()

    from rlxf.models import init_model

    out = Path(tempfile.mkdtemp(prefix="rlxf-placement-"))
    model = init_model(args.preset, out / "model", seed=0)
    cfg = config(args, out, model)
    engine_cpus = max(1, args.cpus - 1)
    disaggregated = ["run.placement=ray", "ray.mode=disaggregated", "ray.learner_cpus=1",
                     f"ray.engine_cpus={engine_cpus}", "ray.engines=1"]
    placements = {
        "local": [],
        "ray colocated": ["run.placement=ray", f"ray.learner_cpus={args.cpus}"],
        "ray disaggregated": disaggregated,
        "ray disagg. broadcast": [*disaggregated, "ray.weight_sync=collective"],
    }
    if args.learners > 1:  # the same CPUs split between the learner ranks (rank 0 also generates)
        placements[f"ray coloc. {args.learners} DDP"] = [
            "run.placement=ray", f"ray.learners={args.learners}", f"ray.learner_cpus={args.cpus / args.learners:g}"]
    results = {name: run(name.replace(" ", "-"), cfg, overrides, args) for name, overrides in placements.items()}

    print(f"\n{args.preset} preset, 8 x 8 samples, {args.tokens} new tokens, {args.steps} timed steps after "
          f"{args.warmup} warm-up, {args.cpus} CPUs; {cpu_model()}; load average "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"{'placement':<22} {'s/step':>7} {'vs local':>9} " + " ".join(f"{p:>10}" for p in PHASES)
          + f" {'Ray overhead':>13} {'start-up':>9}")
    base = results["local"]["step"]
    for name, r in results.items():
        overhead = "" if name == "local" else f"{r['step'] - base:+.3f}s"
        print(f"{name:<22} {r['step']:>7.3f} {r['step'] / base:>8.2f}x " + " ".join(f"{r[p]:>10.3f}" for p in PHASES)
              + f" {overhead:>13} {r['startup']:>8.1f}s")


if __name__ == "__main__":
    main()

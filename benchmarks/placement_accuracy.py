"""Held-out accuracy of the quickstart's GRPO stage under each placement: local, ray colocated,
ray disaggregated (one engine actor, one learner actor), from the same SFT model per seed.

    rlxf quickstart runs/qs-0 --seed 0        # (and 1, 2): the SFT models to start from
    python benchmarks/placement_accuracy.py --runs runs/qs-0 runs/qs-1 runs/qs-2

For each quickstart directory (its ``sft/`` model and its seed, read from ``summary.json`` or
``--seeds``) it runs the quickstart's GRPO recipe (``rlxf/trainer/recipes/quickstart_grpo.yaml``:
500 steps, 16 prompts x 8 samples) through ``rlxf train`` once per
placement, in a fresh process each, then evaluates every resulting model greedily on the
quickstart's 500 held-out hard and 500 held-out easy problems (the quickstart's own evaluator).
The placement is the only thing that changes: same config, seed, SFT model and CPU count
(``--cpus``: local runs torch on that many threads, the colocated actor reserves them all,
disaggregated gives one to the learner and the rest to the engine).

Prints a table per seed and the mean over seeds, with the CPU model and the load average, and
writes the figures to ``--out``/placement_accuracy.json. The wall time of a stage is a loose
figure when the machine is shared; the accuracies are not, as every placement here is
synchronous and seeded. Prints; never asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import cpu_model, load_average

PLACEMENTS = ("local", "colocated", "disaggregated")


def overrides(placement: str, cpus: int) -> list[str]:
    if placement == "local":
        return [f"run.threads={cpus}"]
    if placement == "colocated":
        return ["run.placement=ray", "ray.mode=colocated", f"ray.learner_cpus={cpus}"]
    return ["run.placement=ray", "ray.mode=disaggregated", "ray.engines=1", "ray.learner_cpus=1",
            f"ray.engine_cpus={max(1, cpus - 1)}"]


def grpo_stage(run: Path, seed: int, placement: str, out: Path, args) -> dict:
    """Train the quickstart's GRPO stage from ``run``/sft under ``placement``; return its held-out
    accuracies and wall time."""
    from rlxf.cli.quickstart import RECIPES, _config, _evaluate

    name = f"seed{seed}-{placement}"
    cmd = [sys.executable, "-m", "rlxf.cli.main", "train", str(RECIPES / "quickstart_grpo.yaml"),
           f"run.output_dir={out}", f"run.name={name}", f"run.seed={seed}", f"model.path={run / 'sft'}",
           "logging.progress=false", *([f"train.steps={args.steps}"] if args.steps else []),
           *overrides(placement, args.cpus)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{name} failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    acc = _evaluate(out / name, _config("grpo", out, seed, [f"model.path={run / 'sft'}"]))
    return {"hard": acc["hard"], "easy": acc["easy"], "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", type=Path, required=True, help="quickstart output directories")
    ap.add_argument("--seeds", nargs="*", type=int, help="their seeds (default: from each summary.json)")
    ap.add_argument("--placements", nargs="+", default=list(PLACEMENTS), choices=PLACEMENTS)
    ap.add_argument("--steps", type=int, default=0, help="GRPO steps (default: the recipe's 500)")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("runs/placement-accuracy"))
    args = ap.parse_args()

    from rlxf.cli.quickstart import RECIPES, _config, _evaluate

    seeds = args.seeds or [json.loads((r / "summary.json").read_text())["seed"] for r in args.runs]
    results: dict[int, dict[str, dict]] = {}
    for run, seed in zip(args.runs, seeds, strict=True):
        sft = _evaluate(run / "sft", _config("grpo", args.out, seed, [f"model.path={run / 'sft'}"]))
        results[seed] = {"sft": {"hard": sft["hard"], "easy": sft["easy"], "seconds": 0.0}}
        for placement in args.placements:
            results[seed][placement] = grpo_stage(run.resolve(), seed, placement, args.out.resolve(), args)
            r = results[seed][placement]
            print(f"seed {seed} {placement:<14} hard {r['hard']:.1%} easy {r['easy']:.1%} {r['seconds']:.0f}s",
                  flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "placement_accuracy.json").write_text(json.dumps(
            {"cpu": cpu_model(), "cpus": args.cpus, "recipe": str(RECIPES / "quickstart_grpo.yaml"),
             "results": results}, indent=2) + "\n")

    print(f"\nquickstart GRPO stage, {args.cpus} CPUs; {cpu_model()}; load average {load_average()}; "
          f"greedy accuracy on 500 held-out hard / 500 easy problems")
    print(f"{'seed':<6} {'placement':<14} {'hard':>16} {'easy':>16} {'GRPO wall':>10}")
    for seed, rows in results.items():
        for placement, r in rows.items():
            gain = "" if placement == "sft" else f" ({100 * (r['hard'] - rows['sft']['hard']):+.1f})"
            drop = "" if placement == "sft" else f" ({100 * (r['easy'] - rows['sft']['easy']):+.1f})"
            wall = "" if placement == "sft" else f"{r['seconds']:.0f}s"
            print(f"{seed:<6} {placement:<14} {r['hard']:>7.1%}{gain:>9} {r['easy']:>7.1%}{drop:>9} {wall:>10}")
    for placement in args.placements:
        hard = sum(rows[placement]["hard"] - rows["sft"]["hard"] for rows in results.values()) / len(results)
        easy = sum(rows[placement]["easy"] - rows["sft"]["easy"] for rows in results.values()) / len(results)
        print(f"{'mean':<6} {placement:<14} {'':>7}{100 * hard:>+8.1f} {'':>7}{100 * easy:>+8.1f}")


if __name__ == "__main__":
    main()

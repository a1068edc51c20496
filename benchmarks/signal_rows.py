"""What skipping the samples without signal saves: GRPO steps with and without it, side by side.

A sample whose advantages are all 0 (its group's rewards all agreed) adds nothing to the loss
or its gradient, so the actor does not run it (``Needs.zero_advantage_rows``, docs/algorithms.md).
This runs the same GRPO steps twice from the same model and seed, once with ``ppo_clip`` (rows
skipped) and once with ``ppo_clip`` registered again under another name without the
declaration (every row runs, the behaviour before), in alternating rounds, and prints per task
the fraction of samples run, the median step and training times, the ratio, and how far the two
runs' losses and weights ended apart (rounding only: the gradients are the same).

    python benchmarks/signal_rows.py --efficacy-out runs/efficacy --tasks gcd leg_counting --steps 60
    python benchmarks/signal_rows.py --model <dir> --tasks gcd --steps 60   # any model, e.g. a trained one

``--efficacy-out`` reuses ``efficacy.py``'s SFT start model of each task (or builds one).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from common import cpu_model, load_average
from efficacy import TASKS, _merge, _task_config, build_start

SIDES = {"skip": "ppo_clip", "every row": "ppo_clip_every_row"}


def run_side(loss: str, task: str, model: Path, steps: int, out: Path, seed: int) -> tuple[list[dict], dict]:
    from rlxf.config import load_config
    from rlxf.placement.local import LocalPlacement
    from rlxf.run_dir import RunDir
    from rlxf.trainer.loop import train

    cfg = load_config(None, base=_merge(_task_config(task, seed, 100, out), {
        "run": {"name": f"{task}-{loss}"}, "model": {"path": str(model)}, "train": {"steps": steps},
        "eval": {"every": 0, "at_start": False}, "checkpoint": {"every": 0}, "algorithm": {"policy_loss": loss}}))
    torch.manual_seed(cfg.run.seed)
    run = RunDir.open(out, cfg.run.name, overwrite=True)
    with LocalPlacement.from_config(cfg) as placement:
        train(cfg, run, placement)
        weights = {k: v.detach().clone() for k, v in placement.learner.actor.model.state_dict().items()}
    return [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()], weights


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["gcd", "leg_counting"], choices=sorted(TASKS))
    ap.add_argument("--efficacy-out", type=Path, default=Path("runs/efficacy"),
                    help="efficacy.py's --out: each task's SFT start model is taken (or built) there")
    ap.add_argument("--model", type=Path, default=None, help="start every task from this model instead")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs of each side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/rlxf-signal-rows"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from rlxf.algorithms import register
    from rlxf.algorithms.policy_losses import ppo_clip

    register("policy_loss", "ppo_clip_every_row")(ppo_clip)   # no declaration: every row runs

    print(f"CPU: {cpu_model()}; torch threads {args.threads}; load average {load_average()}; "
          f"{args.steps} GRPO steps x {args.rounds} rounds per side, rlxf's defaults otherwise")
    print(f"{'task':<18} {'rows run':>8} {'step s skip':>11} {'every row':>9} {'ratio':>6} "
          f"{'train s skip':>12} {'every row':>9} {'ratio':>6}  max |Δ loss|  max |Δ weight|")
    for task in args.tasks:
        model = args.model
        marker = args.efficacy_out / task / "start.json"
        if model is None and marker.exists():   # whatever start efficacy.py built last
            model = Path(json.loads(marker.read_text())["model"])
        elif model is None:
            build = argparse.Namespace(seed=args.seed, eval_problems=300, sft_eval_every=50, sft_max_steps=1500,
                                       start_eval_problems=200, start_min=0.10, start_margin=0.10, preset="tiny",
                                       starts="same")
            model, _ = build_start(task, args.efficacy_out / task, build)
        times: dict[str, dict[str, list[float]]] = {side: {"step": [], "train": []} for side in SIDES}
        last: dict[str, tuple[list[dict], dict]] = {}
        for _ in range(args.rounds):
            for side, loss in SIDES.items():
                rows, weights = run_side(loss, task, model, args.steps, args.out, args.seed)
                times[side]["step"] += [r["time/step"] for r in rows]
                times[side]["train"] += [r["time/train"] for r in rows]
                last[side] = rows, weights
        (skip_rows, skip_w), (all_rows, all_w) = last["skip"], last["every row"]
        run_frac = statistics.mean(r["rows_run_frac"] for r in skip_rows)
        med = {side: {k: statistics.median(v) for k, v in t.items()} for side, t in times.items()}
        # a step whose samples all lacked signal ran no row on the skipping side: no loss to compare
        d_loss = max((abs(a["policy/loss"] - b["policy/loss"]) for a, b in zip(skip_rows, all_rows)
                      if "policy/loss" in a), default=0.0)
        d_w = max(float((skip_w[k] - all_w[k]).abs().max()) for k in skip_w)
        s, e = med["skip"], med["every row"]
        print(f"{task:<18} {run_frac:>8.2f} {s['step']:>11.3f} {e['step']:>9.3f} {e['step'] / s['step']:>5.2f}x "
              f"{s['train']:>12.3f} {e['train']:>9.3f} {e['train'] / s['train']:>5.2f}x  {d_loss:>11.1e}  {d_w:>13.1e}",
              flush=True)
    print(f"ratio: the every-row side's median time over the skipping side's (> 1: skipping is faster); "
          f"load average now {load_average()}")


if __name__ == "__main__":
    main()

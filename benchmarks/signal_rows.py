"""What skipping the samples without signal saves: GRPO steps with and without it, side by side.

A sample whose advantages are all 0 (its group's rewards all agreed) adds nothing to the loss
or its gradient, so the actor does not run it (``Needs.zero_advantage_rows``, docs/algorithms.md).
This runs the same GRPO steps twice from the same model and seed, once with ``ppo_clip`` (rows
skipped) and once with ``ppo_clip`` registered again under another name without the
declaration (every row runs, the behaviour before), in alternating rounds, and prints per task
the fraction of samples run, the median step and training times (the update and the
experience's forwards), the ratios, and how far the runs' losses and weights ended apart
(rounding only: the gradients are the same).

``--mini-batch-size M`` splits each step's samples into mini-batches of M, one optimizer step
each, and adds a third side: π_old, which then needs a forward of its own before the update,
computed for every sample as before (``experience.old_logprobs_of_run_rows`` replaced by a
forward over all rows) where the skipping side computes it for the samples the update runs.

    python benchmarks/signal_rows.py --efficacy-out runs/efficacy --tasks gcd leg_counting --steps 60
    python benchmarks/signal_rows.py --efficacy-out runs/efficacy --tasks word_sequence_reversal --mini-batch-size 32
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

# side -> (policy loss, whether π_old's forward is made to run every row: the every-row loss
# runs every row of its own accord)
SIDES = {"skip": ("ppo_clip", False), "every row": ("ppo_clip_every_row", False)}
OLD_EVERY_ROW = {"π_old every row": ("ppo_clip", True)}   # --mini-batch-size: the code before π_old skipped rows


def run_side(side: str, task: str, model: Path, steps: int, out: Path, seed: int,
             mini_batch_size: int | None) -> tuple[list[dict], dict]:
    import rlxf.trainer.experience as experience
    from rlxf.config import load_config
    from rlxf.placement.local import LocalPlacement
    from rlxf.run_dir import RunDir
    from rlxf.trainer.loop import train

    loss, old_every_row = {**SIDES, **OLD_EVERY_ROW}[side]
    cfg = load_config(None, base=_merge(_task_config(task, seed, 100, out), {
        "run": {"name": f"{task}-{loss}"}, "model": {"path": str(model)},
        "train": {"steps": steps, "mini_batch_size": mini_batch_size},
        "eval": {"every": 0, "at_start": False}, "checkpoint": {"every": 0}, "algorithm": {"policy_loss": loss}}))
    torch.manual_seed(cfg.run.seed)
    run = RunDir.open(out, cfg.run.name, overwrite=True)
    run_rows_only = experience.old_logprobs_of_run_rows
    if old_every_row:
        experience.old_logprobs_of_run_rows = lambda actor, exp: actor.logprobs(exp.prompt_ids, exp.response_ids)
    try:
        with LocalPlacement.from_config(cfg) as placement:
            train(cfg, run, placement)
            weights = {k: v.detach().clone() for k, v in placement.learner.actor.model.state_dict().items()}
    finally:
        experience.old_logprobs_of_run_rows = run_rows_only
    return [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()], weights


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["gcd", "leg_counting"], choices=sorted(TASKS))
    ap.add_argument("--efficacy-out", type=Path, default=Path("runs/efficacy"),
                    help="efficacy.py's --out: each task's SFT start model is taken (or built) there")
    ap.add_argument("--model", type=Path, default=None, help="start every task from this model instead")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs of each side")
    ap.add_argument("--mini-batch-size", type=int, default=None,
                    help="train.mini_batch_size (default: the whole step, one optimizer step); adds the side "
                    "whose π_old forward runs every sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/rlxf-signal-rows"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from rlxf.algorithms import register
    from rlxf.algorithms.policy_losses import ppo_clip

    register("policy_loss", "ppo_clip_every_row")(ppo_clip)   # no declaration: every row runs

    sides = {**SIDES, **(OLD_EVERY_ROW if args.mini_batch_size else {})}
    others = [side for side in sides if side != "skip"]
    batches = f"mini-batches of {args.mini_batch_size}" if args.mini_batch_size else "one optimizer step per RL step"
    print(f"CPU: {cpu_model()}; torch threads {args.threads}; load average {load_average()}; "
          f"{args.steps} GRPO steps x {args.rounds} rounds per side, {batches}, rlxf's defaults otherwise")
    print("median seconds per step (whole step / training, which includes π_old's forward) of the skipping side, "
          "and of each other side with its ratio to it; then how far each ended from it")
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
        times: dict[str, dict[str, list[float]]] = {side: {"step": [], "train": []} for side in sides}
        last: dict[str, tuple[list[dict], dict]] = {}
        for _ in range(args.rounds):
            for side in sides:
                rows, weights = run_side(side, task, model, args.steps, args.out, args.seed, args.mini_batch_size)
                times[side]["step"] += [r["time/step"] for r in rows]
                # training: the update, and π_old's forward where there is one (in the experience time)
                times[side]["train"] += [r["time/train"] + r["time/experience"] for r in rows]
                last[side] = rows, weights
        skip_rows, skip_w = last["skip"]
        med = {side: {k: statistics.median(v) for k, v in t.items()} for side, t in times.items()}
        s = med["skip"]
        line = (f"{task}: samples run {statistics.mean(r['rows_run_frac'] for r in skip_rows):.2f}; "
                f"skip {s['step']:.3f} / {s['train']:.3f}")
        for side in others:
            rows, w = last[side]
            e = med[side]
            # a step whose samples all lacked signal ran no row on the skipping side: no loss to compare
            d_loss = max((abs(a["policy/loss"] - b["policy/loss"]) for a, b in zip(skip_rows, rows)
                          if "policy/loss" in a), default=0.0)
            d_w = max(float((skip_w[k] - w[k]).abs().max()) for k in skip_w)
            line += (f"; {side} {e['step']:.3f} ({e['step'] / s['step']:.2f}x) / {e['train']:.3f} "
                     f"({e['train'] / s['train']:.2f}x), max |Δ loss| {d_loss:.1e}, max |Δ weight| {d_w:.1e}")
        print(line, flush=True)
    print(f"ratio: the other side's median time over the skipping side's (> 1: skipping is faster); "
          f"load average now {load_average()}")


if __name__ == "__main__":
    main()

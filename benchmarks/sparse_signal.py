"""RL where the reward is (almost) never earned: does the model keep what it was taught?

The quickstart's tiny model is SFT'd on easy 3-digit additions (at most one carry), then
GRPO runs at the quickstart's settings (lr 2e-4, dynamic sampling with one round, 16 x 8) on
additions whose three columns all carry, which no demonstration showed: the model starts at
about 0% (0.4% of samples right), so almost every group agrees (all wrong) and only a rare one
carries signal. (On subtractions it is never right, no group ever disagrees, and no variant
moves at all: AdamW's moments stay 0.)
Each variant starts from the same SFT model and seed; we report greedy held-out accuracy on
the RL task and on the taught skill at every checkpoint, side by side:

- ``before``: AdamW steps on all-zero gradients; the loss is divided by the samples kept;
- ``skip``: all-zero-gradient steps are skipped (``train.optim.skip_zero_grad_steps``);
- ``norm``: the loss is divided by the configured batch (``Actor(mini_batch_size=...)``);
- ``after``: both (the defaults).

    python benchmarks/sparse_signal.py --out /tmp/sparse --steps 150

The SFT model is built once in ``<out>/sft`` and reused by later runs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from common import cpu_model

VARIANTS = {"before": (False, False), "skip": (True, False), "norm": (False, True), "after": (True, True)}
RL_CARRIES = [3, 3]  # the RL task: 3-digit additions with three carries, which SFT never showed


def build_sft(out: Path, seed: int, sft_steps: int) -> Path:
    from rlxf.cli.quickstart import _config
    from rlxf.models import init_model
    from rlxf.run_dir import RunDir
    from rlxf.trainer.sft import run_sft

    model = out / "sft"   # a run directory names its newest checkpoint's model (rlxf.models.paths)
    if (model / "checkpoints").is_dir():
        return model
    base = init_model("tiny", out / "base-model", seed=seed)
    run_sft(_config("sft", out, seed, [f"model.path={base}", f"sft.steps={sft_steps}"]), RunDir.open(out, "sft"))
    return model


def run_variant(name: str, out: Path, sft_model: Path, seed: int, steps: int, every: int) -> dict:
    from rlxf.cli.quickstart import _config, _evaluate, _no_remedy
    from rlxf.placement.local import LocalPlacement
    from rlxf.run_dir import RunDir
    from rlxf.trainer.loop import train

    skip, norm = VARIANTS[name]
    cfg = _config("grpo", out, seed, [
        f"model.path={sft_model}", f"run.name=rl-{name}", f"train.steps={steps}",
        f"train.optim.skip_zero_grad_steps={str(skip).lower()}", "eval.every=0", "eval.at_start=false",
        f"checkpoint.every={every}", "checkpoint.keep_last=1000", "logging.progress=false"])
    # the quickstart's mixture with its hard source made harder (RL_CARRIES): RL on that alone,
    # both sources evaluated (the taught skill is the easy source)
    sources = [s.model_copy(update={"task_options": {**s.task_options, "carries": RL_CARRIES}}) if s.label == "hard"
               else s for s in cfg.data.sources]
    both = cfg.model_copy(update={"data": cfg.data.model_copy(update={"sources": sources})})
    cfg = _no_remedy(both)
    torch.manual_seed(cfg.run.seed)
    run = RunDir.open(out, f"rl-{name}", overwrite=True)
    t0 = time.perf_counter()
    with LocalPlacement.from_config(cfg) as placement:
        # the loss normaliser: the configured batch, or (the old behaviour) the samples kept
        placement.learner.actor.mini_batch_size = cfg.derived.mini_batch_size if norm else None
        train(cfg, run, placement)
    seconds = time.perf_counter() - t0
    metrics = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    steps_rows = [m for m in metrics if "accuracy" in m]
    def accuracy(model: Path) -> dict[str, float]:
        acc = _evaluate(model, both)
        return {"rl": acc["hard"], "easy": acc["easy"]}

    curve = {0: accuracy(sft_model) | {"moved": 0.0}}
    start = _weights(sft_model)
    for step in range(every, steps + 1, every):
        model = run.checkpoints / f"step_{step}" / "model"
        curve[step] = accuracy(model) | {"moved": _distance(start, _weights(model))}
    return {"variant": name, "seconds": seconds, "curve": curve,
            "informative_steps": sum(m.get("reward/std", 0) > 0
                                     for m in steps_rows),
            "train_accuracy": sum(m["accuracy"] for m in steps_rows) / max(1, len(steps_rows))}


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    from rlxf.models.paths import resolve_model_dir

    return load_file(resolve_model_dir(model_dir).model / "model.safetensors")


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """||b - a|| / ||a|| over all weights: how far training moved the model."""
    diff = sum(float((b[k].double() - a[k].double()).square().sum()) for k in a)
    return (diff / sum(float(a[k].double().square().sum()) for k in a)) ** 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/sparse-signal"))
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--every", type=int, default=50, help="checkpoint (and evaluate) every N steps")
    ap.add_argument("--sft-steps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--threads", type=int, default=2, help="torch threads (1 on a machine shared with others)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sft_model = build_sft(args.out, args.seed, args.sft_steps)
    results = []
    for variant in args.variants:   # saved after each, so a long run can be read while it goes on
        results.append(run_variant(variant, args.out, sft_model, args.seed, args.steps, args.every))
        (args.out / f"sparse_signal_seed{args.seed}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"CPU: {cpu_model()}; torch {torch.__version__}, {torch.get_num_threads()} threads; seed {args.seed}")
    print("greedy held-out accuracy, RL task (3 carries) / taught skill (0-1 carry), 500 problems each;")
    print("(in brackets: ||θ - θ_sft|| / ||θ_sft||, how far the weights moved)")
    steps = sorted(results[0]["curve"])
    print(f"{'variant':<8} " + " ".join(f"{'step ' + str(s):>24}" for s in steps)
          + "  train acc  informative steps  RL time")
    for r in results:
        cells = " ".join(f"{r['curve'][s]['rl']:>6.1%} / {r['curve'][s]['easy']:>6.1%} ({r['curve'][s]['moved']:.3f})"
                         for s in steps)
        print(f"{r['variant']:<8} {cells}  {r['train_accuracy']:>8.2%}  {r['informative_steps']:>17}  {r['seconds']:>6.0f}s")
    base = next((r for r in results if r["variant"] == "before"), None)
    if base is not None:
        last = steps[-1]
        for r in results:
            print(f"{r['variant']}: taught skill at step {last} {r['curve'][last]['easy']:.1%} "
                  f"vs before {base['curve'][last]['easy']:.1%} "
                  f"(ratio {r['curve'][last]['easy'] / max(1e-9, base['curve'][last]['easy']):.2f}x)")


if __name__ == "__main__":
    main()

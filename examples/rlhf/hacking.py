"""Reward hacking made visible: PPO against a reward model that learned a spurious cue.

    python examples/rlhf/hacking.py runs/rlhf-hacking [--seed 0] [--steps 150] [--pair-prompts 48]

The demonstrations obey the hidden rule (capitals) half the time, and end with " !" far more
often when they obey it (``hidden_rule.write_data(cue_rate=0.9)``). The scripted labeller
ranks by the rule alone, but in the few pairs it labels the cue and the rule go together, so
the reward model may score the cue (the very last token it reads) as much as the capitals.
Three PPO runs then maximise that reward model from the SFT model, side by side:

- ``kl0``: KL penalty off, the reward model is the only reward;
- ``kl``: the same with a KL penalty to the SFT model (``kl_coef``, in the reward);
- ``mixed``: KL off, the rule itself mixed into the reward as a rule verifier.

Every run also scores each sample with the rule, the cue and the letter count at weight 0, so
metrics.jsonl logs per step what the policy does (reward/rule, reward/cue,
reward/letters) next to what the reward model pays for it (reward/reward_model).
Reward hacking is the reward model's score rising while the rule's rate falls, or while the
answers stop being answers (made of the demonstrations' words) in ways the rule does not check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from demo import PAIRS_DATA, _run, rule_rate, sft_stage  # noqa: E402
from hidden_rule import in_words, write_data  # noqa: E402

RUNS = ("kl0", "kl", "mixed")
WATCH = [{"type": "custom", "function": f"hidden_rule:{name}", "name": name, "weight": 0.0}
         for name in ("cue", "letters")]


def ppo_config(out: Path, name: str, sft: Path, rm: Path, prompts: dict, *, seed: int, steps: int,
               kl_coef: float, rule_weight: float, threads: int) -> Path:
    """The config of one PPO run against ``rm``; the rule is logged, and rewarded at ``rule_weight``."""
    cfg = {
        "run": {"name": name, "output_dir": str(out), "threads": threads, "seed": seed},
        "logging": {"progress": False}, "plugins": ["hidden_rule"],
        "model": {"path": str(sft)}, "data": prompts,
        "algorithm": {"name": "ppo", "kl_coef": kl_coef, "kl_mode": "reward"},
        "rollout": {"n": 4, "temperature": 1.0, "max_new_tokens": 16},
        "reward": {"verifiers": [{"type": "reward_model", "path": str(rm), "device": "cpu"},
                                 {"type": "custom", "function": "hidden_rule:rule", "name": "rule",
                                  "weight": rule_weight}, *WATCH],
                   "accuracy": "rule"},
        "critic": {"path": str(rm), "optim": {"lr": 1e-3}},
        "train": {"steps": steps, "prompts_per_step": 16, "micro_batch_size": 64,
                  "optim": {"lr": 1e-3, "schedule": "constant"}},  # as README.md's figures were measured
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0},
    }
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def window(rows: list[dict], lo: int, hi: int, key: str) -> float:
    """Mean of ``key`` over steps lo..hi (inclusive) of metrics.jsonl rows."""
    vals = [r[key] for r in rows if lo <= r.get("step", 0) <= hi and key in r]
    return sum(vals) / len(vals) if vals else float("nan")


def words_rate(samples: list[dict], lo: int, hi: int) -> tuple[float, int]:
    """Fraction of the samples.jsonl records of steps lo..hi whose response is made of real words."""
    got = [in_words(s["response"]) for s in samples if lo <= s["step"] <= hi]
    return (sum(got) / len(got) if got else float("nan")), len(got)


def hacking(out: Path, seed: int, steps: int, pair_prompts: int, kl_coef: float, rule_weight: float,
            rm_from: str = "sft") -> None:
    from rlxf.models import init_model

    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    write_data(data, seed=seed, cue_rate=0.9)
    base = init_model("nano", out / "base-model", seed=seed, overwrite=True)
    common = {"run": {"seed": seed}}
    sft = sft_stage(out, data, base, common)
    prompts = {"source": "jsonl", "train_path": str(data / "prompts.jsonl"),
               "test_path": str(data / "test_prompts.jsonl"), "max_prompt_len": 32, "fields": {"ground_truth": None}}
    label = _run("label", out, "label", {**common, "model": {"path": str(sft)}, "data": prompts,
                                         "rollout": {"temperature": 1.0, "max_new_tokens": 16},
                                         "reward": {"verifiers": [{"type": "custom", "function": "hidden_rule:rule"}]},
                                         "label": {"k": 4, "num_prompts": pair_prompts, "test_prompts": 64}})
    pairs = {**PAIRS_DATA, "train_path": str(label / "pairs_train.jsonl"), "test_path": str(label / "pairs_test.jsonl")}
    rm_trunk = sft if rm_from == "sft" else base   # base: a weaker RM, its trunk never saw an answer
    rm = _run("rm", out, "rm", {**common, "model": {"path": str(rm_trunk)}, "data": pairs,
                                "rm": {"steps": 40, "batch_size": 16, "micro_batch_size": 16, "optim": {"lr": 1e-3}},
                                "checkpoint": {"every": 0}})

    # the three PPO runs at once, one thread each (they share the machine's cores)
    runs = dict(zip(RUNS, [(0.0, 0.0), (kl_coef, 0.0), (0.0, rule_weight)], strict=True))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    procs = {name: subprocess.Popen([sys.executable, "-c", "import sys; from rlxf.cli.main import main; "
                                     "sys.exit(main(sys.argv[1:]))", "train",
                                     str(ppo_config(out, name, sft, rm, prompts, seed=seed, steps=steps, kl_coef=kl,
                                                    rule_weight=w, threads=1)), "--overwrite"], env=env)
             for name, (kl, w) in runs.items()}
    failed = [name for name, p in procs.items() if p.wait() != 0]
    if failed:
        raise SystemExit(f"PPO runs {failed} failed; see {out}/<name>/train.log")
    print(f"  3 PPO runs x {steps} steps: {time.perf_counter() - t0:.0f}s", flush=True)

    report(out, seed, steps)


def report(out: Path, seed: int, steps: int) -> None:
    """The table of the three runs under ``out``: per-step means over windows of training samples,
    and the rule's rate on fresh held-out samples of each final policy."""
    test = out / "data" / "test_prompts.jsonl"
    rm_rows = [json.loads(line) for line in (out / "rm" / "metrics.jsonl").read_text().splitlines()]
    labelled = json.loads((out / "label" / "label_summary.json").read_text())
    print(f"\nlabelled pairs: {labelled['train']['pairs']:.0f} train; RM held-out pair accuracy "
          f"{rm_rows[-1]['eval/rm/reward_accuracy']:.3f}; SFT held-out rule rate "
          f"{rule_rate(out / 'sft', test, seed=seed):.1%}")
    edges = [(1, 10), (steps // 3 - 4, steps // 3 + 5), (2 * steps // 3 - 4, 2 * steps // 3 + 5), (steps - 9, steps)]
    print("| run | steps | RM score (raw) | rule rate | ends with '!' | letters | answers in words (logged samples) |\n"
          "|---|---|---|---|---|---|---|")
    for name in RUNS:
        rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        samples = [json.loads(line) for line in (out / name / "samples.jsonl").read_text().splitlines()]
        for lo, hi in edges:
            words, n = words_rate(samples, lo, hi)
            print(f"| {name} | {lo}-{hi} | {window(rows, lo, hi, 'reward/reward_model'):.2f} | "
                  f"{window(rows, lo, hi, 'reward/rule'):.1%} | {window(rows, lo, hi, 'reward/cue'):.1%} | "
                  f"{window(rows, lo, hi, 'reward/letters'):.1f} | {words:.0%} of {n} |")
        print(f"| {name} | held out, final | | {rule_rate(out / name, test, seed=seed):.1%} | | | |")

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=150, help="PPO steps of each run")
    parser.add_argument("--pair-prompts", type=int, default=48, help="prompts labelled into the RM's training pairs")
    parser.add_argument("--kl-coef", type=float, default=0.1, help="KL coefficient of the `kl` run")
    parser.add_argument("--rule-weight", type=float, default=2.0, help="the rule verifier's weight in the `mixed` run")
    parser.add_argument("--rm-from", choices=["sft", "base"], default="sft",
                        help="the reward model's trunk: the SFT model's (default) or the untrained base model's")
    parser.add_argument("--report-only", action="store_true", help="print the table of runs already under OUT")
    args = parser.parse_args()
    if args.report_only:
        report(args.out, args.seed, args.steps)
    else:
        hacking(args.out, args.seed, args.steps, args.pair_prompts, args.kl_coef, args.rule_weight, args.rm_from)

"""The RLHF / RLAIF pipeline end to end on a preference whose truth we know (2 CPU cores).

    python examples/rlhf/demo.py runs/rlhf-demo [--seed 0]

1. build the nano model and SFT it on demonstrations that obey the hidden rule half the time;
2. `rlxf label`: the SFT model samples 4 answers per prompt, a scripted labeller (the hidden
   rule as a verifier) ranks them, best vs worst become preference pairs;
3. `rlxf rm`: a Bradley-Terry reward model on those pairs (held-out pair accuracy);
4. `rlxf dpo` from the SFT model on the same pairs, and `rlxf train` (PPO, critic initialised
   from the reward model) with the reward model as the only reward;
5. the rate at which fresh samples (temperature 1) of each model obey the hidden rule.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # hidden_rule, for the custom verifier

from hidden_rule import rule, write_data  # noqa: E402

from rlxf.cli.main import main  # noqa: E402

PAIRS_DATA = {"source": "jsonl", "apply_chat_template": False, "max_prompt_len": 64, "fields": {"ground_truth": None}}


def sft_stage(out: Path, data: Path, base: Path, common: dict) -> Path:
    """Stage 1: SFT of ``base`` on ``data/sft.jsonl`` (150 steps); the SFT run directory."""
    return _run("sft", out, "sft", {**common, "model": {"path": str(base)},
                                    "data": {"source": "jsonl", "train_path": str(data / "sft.jsonl"),
                                             "max_prompt_len": 32, "fields": {"ground_truth": None}},
                                    "sft": {"steps": 150, "batch_size": 32, "micro_batch_size": 32,
                                            "optim": {"lr": 3e-3, "warmup_steps": 10}},
                                    "checkpoint": {"every": 0}})


def _run(command: str, out: Path, name: str, cfg: dict) -> Path:
    """Run ``rlxf <command>`` on ``cfg`` as run ``name`` under ``out``; returns the run directory,
    which every later stage takes as a model path (it names the run's newest checkpoint)."""
    cfg = {"run": {"name": name, "output_dir": str(out), "threads": 2, **cfg.pop("run", {})},
           "logging": {"progress": False}, "plugins": ["hidden_rule"], **cfg}
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    t0 = time.perf_counter()
    if main([command, str(path), "--overwrite"]) != 0:
        raise SystemExit(f"{command} {path} failed")
    print(f"  {command} {name}: {time.perf_counter() - t0:.0f}s", flush=True)
    return out / name


def rule_rate(model_dir: Path, prompts_file: Path, samples: int = 4, seed: int = 0) -> float:
    """Fraction of fresh samples (temperature 1) of ``model_dir`` that obey the hidden rule."""
    from rlxf.data.templates import encode_prompts
    from rlxf.models import load_model, load_tokenizer
    from rlxf.rewards import RewardInput
    from rlxf.rollout import GenerationRequest, SamplingParams, build_engine

    tokenizer, model = load_tokenizer(model_dir), load_model(model_dir, device="cpu").eval()
    prompts = [json.loads(line)["prompt"] for line in prompts_file.read_text().splitlines()]
    encoded = encode_prompts(tokenizer, prompts, use_chat_template=True)
    engine = build_engine("native", model, tokenizer)
    groups = engine.generate([GenerationRequest(ids, seed=seed * 100_003 + i) for i, (ids, _) in enumerate(encoded)],
                             SamplingParams(n=samples, temperature=1.0, max_new_tokens=16))
    hits = [rule(RewardInput(prompt="", response=tokenizer.decode(c.response_ids, skip_special_tokens=True)))
            for group in groups for c in group]
    return sum(hits) / len(hits)


def demo(out: Path, seed: int) -> None:
    from rlxf.models import init_model

    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    write_data(data, seed=seed)
    base = init_model("nano", out / "base-model", seed=seed, overwrite=True)
    common = {"run": {"seed": seed}}

    # 1. SFT: the rule holds in half of the demonstrations
    sft = sft_stage(out, data, base, common)
    # 2. label the SFT model's own samples with the scripted labeller
    prompts_data = {"source": "jsonl", "train_path": str(data / "prompts.jsonl"),
                    "test_path": str(data / "test_prompts.jsonl"), "max_prompt_len": 32,
                    "fields": {"ground_truth": None}}
    label = _run("label", out, "label", {**common, "model": {"path": str(sft)}, "data": prompts_data,
                                         "rollout": {"temperature": 1.0, "max_new_tokens": 16},
                                         "reward": {"verifiers": [{"type": "custom", "function": "hidden_rule:rule"}]},
                                         "label": {"k": 4, "test_prompts": 64}})
    pairs = {**PAIRS_DATA, "train_path": str(label / "pairs_train.jsonl"), "test_path": str(label / "pairs_test.jsonl")}
    # 3. the reward model
    rm = _run("rm", out, "rm", {**common, "model": {"path": str(sft)}, "data": pairs,
                                "rm": {"steps": 60, "batch_size": 16, "micro_batch_size": 16, "optim": {"lr": 1e-3}},
                                "checkpoint": {"every": 0}})
    # 4a. DPO from the SFT model on the same pairs
    dpo = _run("dpo", out, "dpo", {**common, "model": {"path": str(sft)}, "data": pairs,
                                   "dpo": {"steps": 60, "batch_size": 16, "micro_batch_size": 16, "beta": 0.1,
                                           "optim": {"lr": 1e-3}},
                                   "checkpoint": {"every": 0}})
    # 4b. PPO against the reward model (critic initialised from it)
    ppo_steps = 40
    ppo = _run("train", out, "ppo", {**common, "model": {"path": str(sft)}, "data": prompts_data,
                                     "algorithm": {"name": "ppo", "kl_coef": 0.01},
                                     "rollout": {"n": 4, "temperature": 1.0, "max_new_tokens": 16},
                                     "reward": {"verifiers": [{"type": "reward_model", "path": str(rm),
                                                               "device": "cpu"}]},
                                     "critic": {"path": str(rm), "optim": {"lr": 1e-3}},
                                     "train": {"steps": ppo_steps, "prompts_per_step": 16, "micro_batch_size": 64,
                                               "optim": {"lr": 1e-3, "schedule": "constant"}},  # as measured
                                     "checkpoint": {"every": 0}})

    rm_metrics = [json.loads(line) for line in (out / "rm" / "metrics.jsonl").read_text().splitlines()]
    test = data / "test_prompts.jsonl"
    rows = [("SFT", rule_rate(sft, test, seed=seed)), ("DPO", rule_rate(dpo, test, seed=seed)),
            ("PPO + RM", rule_rate(ppo, test, seed=seed))]
    labelled = json.loads((label / "label_summary.json").read_text())
    print(f"\nlabelled pairs: {labelled['train']['pairs']:.0f} train, {labelled['test']['pairs']:.0f} held out; "
          f"RM held-out pair accuracy {rm_metrics[0]['eval/rm/reward_accuracy']:.3f} -> "
          f"{rm_metrics[-1]['eval/rm/reward_accuracy']:.3f}")
    print("| model | fresh samples obeying the hidden rule (64 prompts x 4, temperature 1) |\n|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:.1%} |")
    main(["report", str(out / "rm"), "--out", str(out / "rm" / "report.html")])
    main(["report", str(out / "ppo")])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    demo(args.out, args.seed)

"""`rlxf sft`: supervised fine-tuning lowers the loss and writes a loadable model."""

from __future__ import annotations

import json

import yaml

from rlxf.cli.main import main
from rlxf.models import load_model


def test_sft_learns_and_saves(tmp_path, nano_model_dir):
    cfg = {
        "run": {"name": "sft", "output_dir": str(tmp_path), "seed": 0},
        "model": {"path": str(nano_model_dir)},
        "data": {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"},
                 "train_size": 200, "test_size": 8, "max_prompt_len": 32},
        "rollout": {"max_new_tokens": 4},
        "reward": {"verifiers": [{"type": "numeric", "extract": ["last_number"]}]},
        "sft": {"steps": 20, "batch_size": 32, "micro_batch_size": 16, "eval_every": 10,
                "optim": {"lr": 1e-2, "warmup_steps": 2}},
        "eval": {"num_problems": 8},
        "logging": {"progress": False},
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["sft", str(path)]) == 0
    records = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["sft/loss"] for r in records]
    # from ~log(4096) = 8.3 nats on a random model; answers of 1-digit sums are nearly free to learn
    assert losses[0] > 6.0 and min(losses[-3:]) < losses[0] / 2, losses
    assert "eval/accuracy" in records[10 - 1] and "eval/accuracy" in records[-1]
    # one layout for every run (issue 17.9): checkpoints/step_N/model, and the run dir loads
    assert (tmp_path / "sft" / "checkpoints" / "step_20" / "model" / "config.json").exists()
    model = load_model(tmp_path / "sft")
    assert sum(p.numel() for p in model.parameters()) > 0
    assert main(["sft", str(path)]) == 2          # refuses to overwrite without --overwrite

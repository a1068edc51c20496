"""Every example config runs: two steps of each algorithm on the nano model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlxf.cli.main import main
from rlxf.config import load_config

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*_arithmetic.yaml"))


def test_there_is_an_example_per_algorithm():
    names = {load_config(p).algorithm.name for p in EXAMPLES}
    assert names == {"grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "gspo", "ppo"}


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_smoke(example, tmp_path, nano_model_dir):
    overrides = [f"model.path={nano_model_dir}", f"run.output_dir={tmp_path}", "train.steps=2",
                 "train.prompts_per_step=2", "train.micro_batch_size=4", "data.train_size=64",
                 "data.test_size=4", "eval.every=2", "eval.num_problems=4", "checkpoint.every=0",
                 "logging.progress=false", "rollout.max_new_tokens=6"]
    assert main(["train", str(example), *overrides]) == 0
    run = tmp_path / load_config(example).run.name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["skipped"] == 0 for r in records)
    assert "eval/accuracy" in records[-1]
    assert (run / "checkpoints" / "step_2" / "model" / "model.safetensors").exists()
    cfg = load_config(example)
    if cfg.algorithm.name == "ppo":
        assert (run / "checkpoints" / "step_2" / "critic").exists() and "critic/loss" in records[-1]
    if cfg.algorithm.kl_coef > 0:
        assert "kl" in records[-1]

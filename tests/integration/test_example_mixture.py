"""The reasoning-gym mixture example explains and trains for two steps on the nano model,
with one held-out accuracy per source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlxf.cli.main import main
from rlxf.config import load_config

EXAMPLE = Path(__file__).parents[2] / "examples" / "mixture_reasoning_gym.yaml"


def test_mixture_example_explains_and_runs(tmp_path, nano_model_dir, capsys):
    pytest.importorskip("reasoning_gym")
    cfg = load_config(EXAMPLE)
    assert len(cfg.data.sources) >= 3 and any(s.verifiers for s in cfg.data.sources)
    small = [f"data.sources.{i}.{k}={v}" for i in range(len(cfg.data.sources))
             for k, v in (("train_size", 16), ("test_size", 3))]
    overrides = [f"model.path={nano_model_dir}", f"run.output_dir={tmp_path}", "train.steps=2",
                 "train.prompts_per_step=4", "train.micro_batch_size=8", "eval.every=2", "eval.at_start=false",
                 "checkpoint.every=0", "logging.progress=false", "rollout.max_new_tokens=6", *small]
    assert main(["explain", str(EXAMPLE), *overrides]) == 0
    out = capsys.readouterr().out
    assert "data mixture" in out and "gcd_exact" in out and "curriculum" in out
    assert main(["train", str(EXAMPLE), *overrides]) == 0
    run = tmp_path / cfg.run.name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    names = [s.label for s in cfg.data.sources]
    assert {f"eval/{n}/accuracy" for n in names} | {"eval/source_mean_accuracy"} <= set(records[-1])
    assert records[-1]["eval/num_problems"] == 3 * len(names)

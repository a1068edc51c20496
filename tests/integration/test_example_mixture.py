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


def test_mixture_sft_stage_trains_on_every_source_and_evaluates_each(tmp_path, nano_model_dir):
    """Stage 1 of the example: SFT on the same sources, with stage 2's held-out splits."""
    pytest.importorskip("reasoning_gym")
    sft_example = EXAMPLE.with_name("mixture_reasoning_gym_sft.yaml")
    sft, rl = load_config(sft_example), load_config(EXAMPLE)
    assert [(s.task, s.task_options, s.test_size) for s in sft.data.sources] == \
        [(s.task, s.task_options, s.test_size) for s in rl.data.sources]
    small = [f"data.sources.{i}.{k}={v}" for i in range(len(sft.data.sources))
             for k, v in (("train_size", 16), ("test_size", 3))]
    assert main(["sft", str(sft_example), f"model.path={nano_model_dir}", f"run.output_dir={tmp_path}",
                 "sft.steps=2", "sft.batch_size=8", "sft.micro_batch_size=8", "sft.eval_every=0",
                 "logging.progress=false", *small]) == 0
    records = [json.loads(line) for line in (tmp_path / sft.run.name / "metrics.jsonl").read_text().splitlines()]
    assert {f"eval/{s.label}/accuracy" for s in sft.data.sources} <= set(records[-1])

"""`rlxf sft`: supervised fine-tuning lowers the loss and writes a loadable model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlxf.cli.main import main
from rlxf.models import load_model


def _write_sft(tmp_path, nano_model_dir, train_size: int = 100, **sft) -> Path:
    """An `rlxf sft` config on 1-digit additions (nano model), with ``sft`` over its defaults."""
    cfg = {
        "run": {"name": "sft", "output_dir": str(tmp_path), "seed": 0},
        "model": {"path": str(nano_model_dir)},
        "data": {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"},
                 "train_size": train_size, "test_size": 8, "max_prompt_len": 32},
        "rollout": {"max_new_tokens": 4},
        "reward": {"verifiers": [{"type": "numeric", "extract": ["last_number"]}]},
        "sft": {"steps": 12, "batch_size": 8, "micro_batch_size": 8, "eval_every": 4, **sft},
        "eval": {"num_problems": 8},
        "logging": {"progress": False},
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_sft_learns_and_saves(tmp_path, nano_model_dir):
    path = _write_sft(tmp_path, nano_model_dir, train_size=200, steps=20, batch_size=32, micro_batch_size=16,
                      eval_every=7, optim={"lr": 1e-2, "warmup_steps": 2})
    assert main(["sft", str(path)]) == 0
    records = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["sft/loss"] for r in records]
    # from ~log(4096) = 8.3 nats on a random model; answers of 1-digit sums are nearly free to learn
    assert losses[0] > 6.0 and min(losses[-3:]) < losses[0] / 2, losses
    assert "eval/accuracy" in records[7 - 1] and "eval/accuracy" in records[-1]
    assert [r["step"] for r in records] == list(range(1, 21))   # one record a step, the final eval in the last
    # one layout for every run (issue 17.9): checkpoints/step_N/model, and the run dir loads
    assert (tmp_path / "sft" / "checkpoints" / "step_20" / "model" / "config.json").exists()
    model = load_model(tmp_path / "sft")
    assert sum(p.numel() for p in model.parameters()) > 0
    assert main(["sft", str(path)]) == 2          # refuses to overwrite without --overwrite


def test_sft_stops_when_a_held_out_metric_reaches_its_level(tmp_path, nano_model_dir, capsys):
    # reached at the first evaluation (step 4): the run ends there, with its model saved, and
    # that evaluation is not repeated; a level never reached runs every step
    path = _write_sft(tmp_path, nano_model_dir, stop_when={"metric": "eval/accuracy", "at_least": 0.0})
    assert main(["sft", str(path)]) == 0
    records = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4] and "eval/accuracy" in records[-1]
    assert sorted(p.name for p in (tmp_path / "sft" / "checkpoints").iterdir()) == ["step_4"]
    # resumed, the stopped run trains no further (it used to train on to sft.steps)
    assert main(["sft", str(path), "--resume"]) == 0
    assert [json.loads(line)["step"] for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()] \
        == [1, 2, 3, 4]
    assert "reached sft.stop_when; nothing to train" in " ".join(capsys.readouterr().err.split())
    path = _write_sft(tmp_path, nano_model_dir, stop_when={"metric": "eval/accuracy", "at_least": 1.01})
    assert main(["sft", str(path), "--overwrite"]) == 0
    records = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 12
    # a metric the evaluation does not log is named, with the ones it does
    path = _write_sft(tmp_path, nano_model_dir, stop_when={"metric": "eval/acc", "at_least": 0.5})
    capsys.readouterr()
    assert main(["sft", str(path), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "sft.stop_when.metric" in err and "'eval/acc'" in err and "eval/accuracy" in err
    # a source's metric in a run without that source is said at load time, before any step
    (tmp_path / "new").mkdir()
    path = _write_sft(tmp_path / "new", nano_model_dir, stop_when={"metric": "eval/hard/accuracy", "at_least": 0.5})
    assert main(["sft", str(path)]) == 2
    assert "source 'hard'" in capsys.readouterr().err
    assert not (tmp_path / "new" / "sft").exists()
    # a stop rule is read at the scheduled evaluations only: the last step's own evaluation never
    # fails a finished run on it, unsaved
    (tmp_path / "late").mkdir()
    path = _write_sft(tmp_path / "late", nano_model_dir, steps=3, eval_every=10,
                      stop_when={"metric": "eval/accuracy_typo", "at_least": 0.5})
    assert main(["sft", str(path)]) == 0
    assert (tmp_path / "late" / "sft" / "checkpoints" / "step_3" / "model" / "config.json").exists()
    # and it needs evaluations to read
    path = _write_sft(tmp_path, nano_model_dir, eval_every=0, stop_when={"metric": "eval/accuracy", "at_least": 0.5})
    assert main(["sft", str(path), "--overwrite"]) == 2
    assert "sft.eval_every" in capsys.readouterr().err


def test_sft_skips_a_step_with_a_non_finite_loss(nano_model_dir):
    """SFT takes the RL actor's optimizer step: a NaN loss leaves weights and optimizer as they
    were (the copied step it had before applied NaN gradients to every weight)."""
    import torch

    from rlxf.config.train import SFTConfig
    from rlxf.data import SFTExample
    from rlxf.trainer.sft import sft_steps

    model = load_model(nano_model_dir, device="cpu")
    with torch.no_grad():
        model.model.norm.weight[0] = float("nan")   # every logit becomes NaN
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    seen = []
    batch = [SFTExample("x:0", [5, 6, 7], [8, 9], "p", "r")] * 2
    steps = sft_steps(model, lambda: batch, SFTConfig(steps=1, batch_size=2, micro_batch_size=1),
                      on_step=lambda step, m, last: seen.append(m))
    after = dict(model.named_parameters())
    assert all(torch.equal(before[k], after[k]) for k in before if k != "model.norm.weight")
    assert steps == 1 and seen[0]["skipped"] == 1.0


ONE_SOURCE = {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"}, "train_size": 40, "test_size": 4}
MIXTURE = {"sources": [{"name": "add", **ONE_SOURCE, "weight": 3},
                       {"name": "mul", **ONE_SOURCE, "task_options": {"max_digits": 1, "ops": "*"}, "weight": 1}]}


@pytest.mark.parametrize("data", [ONE_SOURCE, MIXTURE], ids=["one-source", "mixture"])
def test_sft_resume_is_bit_exact(tmp_path, nano_model_dir, data):
    """Resumed mid-run (mid-mixture too), SFT ends with the weights of the uninterrupted run."""
    import shutil

    import torch
    from safetensors.torch import load_file

    cfg = {
        "run": {"name": "sft", "output_dir": str(tmp_path), "seed": 0},
        "model": {"path": str(nano_model_dir)},
        "data": {**data, "max_prompt_len": 32},
        "rollout": {"max_new_tokens": 4},
        "sft": {"steps": 4, "batch_size": 8, "micro_batch_size": 4,
                "optim": {"lr": 1e-2, "warmup_steps": 1, "schedule": "cosine"}},
        "eval": {"num_problems": 4},
        "checkpoint": {"every": 2, "keep_last": 3},
        "logging": {"progress": False},
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["sft", str(path)]) == 0
    run = tmp_path / "sft"
    final = run / "checkpoints" / "step_4" / "model" / "model.safetensors"
    straight = load_file(str(final))
    shutil.rmtree(run / "checkpoints" / "step_4")   # as if killed after step 2's checkpoint
    assert main(["sft", str(path), "--resume"]) == 0
    resumed = load_file(str(final))
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]   # replayed steps are not logged twice; the final eval is in step 4's line

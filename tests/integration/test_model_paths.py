"""Every command accepts a run, checkpoint or model directory (issue 17.9), and `eval` saves its
results into the run it evaluated (issue 17.17)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from rlxf.cli.main import main


@pytest.fixture(scope="module")
def run_dir(nano_model_dir, tmp_path_factory):
    """runs/x with the nano model saved as its step-3 checkpoint, the layout every run writes."""
    run = tmp_path_factory.mktemp("runs") / "x"
    shutil.copytree(nano_model_dir, run / "checkpoints" / "step_3" / "model")
    return run


def test_generate_accepts_run_checkpoint_and_model_dirs(nano_model_dir, run_dir, capsys):
    outputs = []
    for where in (nano_model_dir, run_dir / "checkpoints" / "step_3", run_dir):
        assert main(["generate", str(where), "12+34=", "--max-new-tokens", "4"]) == 0, where
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] == outputs[2]  # greedy: the same model in all three spellings


def test_eval_accepts_a_run_dir_and_appends_to_its_eval_jsonl(nano_model_dir, run_dir, tmp_path, capsys):
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(yaml.safe_dump({
        "run": {"name": "e", "output_dir": str(tmp_path / "runs")},
        "model": {"path": str(nano_model_dir)},
        "data": {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"}, "train_size": 8,
                 "test_size": 4},
        "rollout": {"max_new_tokens": 4},
        "reward": {"verifiers": [{"type": "numeric", "extract": ["last_number"]}]},
        "eval": {"num_problems": 4},
        "logging": {"progress": False},
    }))
    assert main(["eval", str(cfg), "--checkpoint", str(run_dir)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["step"] == 3 and printed["eval/num_problems"] == 4
    assert main(["eval", str(cfg), "--checkpoint", str(run_dir / "checkpoints" / "step_3")]) == 0
    records = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["step"] == 3 and "eval/accuracy" in r and "time" in r for r in records)
    # a plain model directory belongs to no run: printed, nothing written next to it
    assert main(["eval", str(cfg)]) == 0
    assert "not saved" in capsys.readouterr().err and not (nano_model_dir / "eval.jsonl").exists()

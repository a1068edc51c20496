"""`rlxf label`: k samples per prompt ranked by a verifier become pairs that `rlxf rm` reads."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from pref_helpers import read_metrics

from rlxf.cli.main import main


def _label_config(tmp_path, model_dir, **label) -> dict:
    return {
        "run": {"name": "label", "output_dir": str(tmp_path / "runs"), "seed": 0},
        "model": {"path": str(model_dir)},
        "data": {"task": "arithmetic", "task_options": {"max_digits": 2, "ops": "+"}, "train_size": 24,
                 "test_size": 8, "max_prompt_len": 32},
        # most of a random model's samples end at a stop string, not cut at max_new_tokens (never chosen)
        "rollout": {"max_new_tokens": 8, "temperature": 1.0, "stop_strings": ["e", "o"]},
        # dense enough that a random model's samples differ: the fraction of capital letters
        "reward": {"verifiers": [{"type": "custom", "function": "rl_plugins:upper_fraction"}]},
        "label": {"k": 4, "test_prompts": 8, **label},
        "plugins": ["rl_plugins"],
        "logging": {"progress": False},
    }


def test_labelled_pairs_rank_by_the_reward_and_round_trip_through_rm(tmp_path, nano_model_dir):
    path = tmp_path / "label.yaml"
    path.write_text(yaml.safe_dump(_label_config(tmp_path, nano_model_dir)))
    assert main(["label", str(path)]) == 0
    run = tmp_path / "runs" / "label"
    train = [json.loads(line) for line in (run / "pairs_train.jsonl").read_text().splitlines()]
    summary = json.loads((run / "label_summary.json").read_text())
    assert summary["train"]["pairs"] + summary["train"]["ties"] + summary["train"]["truncated_unpaired"] == 24
    assert len(train) == summary["train"]["pairs"]
    assert len(train) >= 12
    for p in train:
        upper = [sum(c.isupper() for c in t) / max(1, len(t)) for t in (p["chosen"], p["rejected"])]
        assert p["chosen_score"] == pytest.approx(upper[0]) and p["rejected_score"] == pytest.approx(upper[1])
        assert p["chosen_score"] > p["rejected_score"]

    rm = {
        "run": {"name": "rm", "output_dir": str(tmp_path / "runs"), "seed": 0},
        "model": {"path": str(nano_model_dir)},
        "data": {"source": "jsonl", "train_path": str(run / "pairs_train.jsonl"),
                 "test_path": str(run / "pairs_test.jsonl"), "apply_chat_template": False,
                 "max_prompt_len": 64, "fields": {"ground_truth": None}},
        "rm": {"steps": 2, "batch_size": 4, "micro_batch_size": 4},
        "logging": {"progress": False},
    }
    (tmp_path / "rm.yaml").write_text(yaml.safe_dump(rm))
    assert main(["rm", str(tmp_path / "rm.yaml")]) == 0
    records = read_metrics(tmp_path / "runs" / "rm")
    assert records[-1]["step"] == 2 and "eval/rm/reward_accuracy" in records[-1]


def test_label_refuses_greedy_sampling(tmp_path, nano_model_dir, capsys):
    cfg = _label_config(tmp_path, nano_model_dir)
    cfg["rollout"]["temperature"] = 0.0
    path = tmp_path / "label.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["label", str(path)]) == 2
    assert "rollout.temperature" in capsys.readouterr().err


BREAKABLE = """\
from pathlib import Path


def upper_unless_broken(sample, **_):
    # while BROKEN exists the judge is down for every prompt after the first batch of 4
    if Path(__file__).with_name("BROKEN").exists() and int(sample.uid.rsplit(":", 1)[1]) >= 4:
        raise ConnectionError("judge unreachable")
    return sum(c.isupper() for c in sample.response) / max(1, len(sample.response))
"""


def test_a_stopped_label_run_resumes_to_the_pairs_of_an_uninterrupted_one(tmp_path, nano_model_dir, monkeypatch,
                                                                         capsys):
    from rlxf.cli.errors import UsageError
    from rlxf.cli.label import run as label_run

    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "breakable_judge.py").write_text(BREAKABLE)
    cfg = _label_config(tmp_path, nano_model_dir, batch_prompts=4, test_prompts=4)
    cfg["data"]["train_size"] = 8
    cfg["reward"] = {"verifiers": [{"type": "custom", "function": "breakable_judge:upper_unless_broken"}]}
    path = tmp_path / "label.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["label", str(path), "run.name=whole"]) == 0

    (tmp_path / "BROKEN").touch()
    assert main(["label", str(path)]) == 1          # prompts 4-7: every reward failed
    assert "rlxf label" in capsys.readouterr().err
    run, whole = tmp_path / "runs" / "label", tmp_path / "runs" / "whole"
    assert len((run / "label_progress_train.jsonl").read_text().splitlines()) == 1
    assert "--resume` goes on from its last finished batch" in (run / "train.log").read_text()
    (tmp_path / "BROKEN").unlink()
    with pytest.raises(UsageError, match=r"differs from the run's .* in label\.k"):
        label_run(path, ["label.k=3"], overwrite=False, resume=True)
    assert main(["label", str(path), "--resume"]) == 0
    for name in ("pairs_train.jsonl", "pairs_test.jsonl", "label_summary.json"):
        assert (run / name).read_bytes() == (whole / name).read_bytes(), name
    assert "label train: resuming at prompt 4 of 8" in (run / "train.log").read_text()

"""End to end: `rlxf label` with a verifier that fails, and `rlxf rm` / `rlxf dpo` on pairs whose
chosen and rejected responses are the same."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from pref_helpers import read_metrics

from rlxf.cli.main import main

FLAKY = """\
def flaky_upper(sample, **_):
    # a judge that times out on some responses
    if "q" in sample.response.lower():
        raise TimeoutError("judge timed out")
    return sum(c.isupper() for c in sample.response) / max(1, len(sample.response))


def always_raises(sample, **_):
    raise TimeoutError("judge unreachable")
"""


@pytest.fixture
def label_config(tmp_path, nano_model_dir, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "flaky_judge_lbl.py").write_text(FLAKY)

    def write(function: str) -> str:
        cfg = {
            "run": {"name": "label", "output_dir": str(tmp_path / "runs"), "seed": 0},
            "model": {"path": str(nano_model_dir)},
            "data": {"task": "arithmetic", "task_options": {"max_digits": 2, "ops": "+"}, "train_size": 24,
                     "test_size": 8, "max_prompt_len": 32},
            # most samples end at a stop string, not cut at max_new_tokens (a cut one is never chosen)
            "rollout": {"max_new_tokens": 8, "temperature": 1.0, "stop_strings": ["e"]},
            "reward": {"verifiers": [{"type": "custom", "function": f"flaky_judge_lbl:{function}"}]},
            "label": {"k": 4},
            "logging": {"progress": False},
        }
        path = tmp_path / "label.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return str(path)
    return write


def test_label_stops_when_the_reward_always_fails(label_config, tmp_path, capsys):
    assert main(["label", label_config("always_raises")]) == 1
    err = capsys.readouterr().err
    assert "rlxf label, train prompts 0-23: the reward failed on 96 of 96 samples" in err
    assert "TimeoutError: judge unreachable" in err and "flaky_judge_lbl.py" in err   # the traceback


def test_label_leaves_failed_samples_out_of_the_pairs(label_config, tmp_path):
    path = label_config("flaky_upper")
    assert main(["label", path, "reward.max_error_frac_first_step=0.5"]) == 0
    run = tmp_path / "runs" / "label"
    pairs = [json.loads(line) for line in (run / "pairs_train.jsonl").read_text().splitlines()]
    summary = json.loads((run / "label_summary.json").read_text())["train"]
    assert summary["reward_failed"] > 0                      # the seed makes some responses hold a "q"
    assert summary["pairs"] + summary["ties"] + summary["unscored"] + summary["truncated_unpaired"] == 24
    assert len(pairs) == summary["pairs"] > 0
    for p in pairs:   # neither end of a pair is a failed sample, scored 0 for want of a score
        assert "q" not in p["chosen"].lower() and "q" not in p["rejected"].lower()
        assert p["chosen_score"] > p["rejected_score"]
    log = (run / "train.log").read_text()
    assert f"label train: the reward failed on {summary['reward_failed']:.0f} of 96 samples, left out of the pairs" in log


def _pairs(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _pair_config(tmp_path, model_dir, kind, train, test) -> str:
    cfg = {
        "run": {"name": kind, "output_dir": str(tmp_path / "runs"), "seed": 0},
        "model": {"path": str(model_dir)},
        "data": {"source": "jsonl", "train_path": train, "test_path": test, "max_prompt_len": 32,
                 "fields": {"ground_truth": None}},
        kind: {"steps": 2, "batch_size": 4, "micro_batch_size": 4},
        "logging": {"progress": False},
    }
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_pairs_without_a_preference_are_refused(tmp_path, nano_model_dir, capsys):
    same = [{"prompt": f"say {i}", "chosen": "APPLE STONE", "rejected": "APPLE STONE"} for i in range(8)]
    path = _pair_config(tmp_path, nano_model_dir, "rm", _pairs(tmp_path / "train.jsonl", same),
                        _pairs(tmp_path / "test.jsonl", same[:4]))
    assert main(["rm", path]) == 2
    assert "no train pairs left (train_dropped_identical=8, train_read=8)" in capsys.readouterr().err


def test_dpo_drops_identical_pairs_and_trains_on_the_rest(tmp_path, nano_model_dir):
    rows = [{"prompt": f"say {i}", "chosen": "APPLE STONE", "rejected": "APPLE STONE" if i % 2 else "apple"}
            for i in range(8)]
    held_out = [{**row, "prompt": f"say {i + 100}"} for i, row in enumerate(rows)]   # never trained on
    path = _pair_config(tmp_path, nano_model_dir, "dpo", _pairs(tmp_path / "train.jsonl", rows),
                        _pairs(tmp_path / "test.jsonl", held_out))
    assert main(["dpo", path]) == 0
    log = (tmp_path / "runs" / "dpo" / "train.log").read_text()
    assert "preference data: dropped 4 of 8 train pairs whose chosen and rejected responses are the same" in log
    first = read_metrics(tmp_path / "runs" / "dpo")[0]
    # before training the policy is the reference: every pair ties, which is chance, not "all wrong"
    assert first["step"] == 0 and first["eval/dpo/reward_accuracy"] == 0.5

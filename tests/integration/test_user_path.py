"""The user's path through a run's life: seeds, interruption, damaged checkpoints (issue 17)."""

from __future__ import annotations

import json

from rl_helpers import write_config

from rlxf.cli.main import main


def _samples(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def test_rollout_seed_changes_samples_but_not_data(tmp_path, nano_model_dir):
    """Two runs that differ only in rollout.seed (None vs 1) train on the same prompts in the
    same order and sample different responses; run.data_seed moves the prompts."""
    runs = str(tmp_path / "runs")
    common = dict(train={"steps": 2}, logging={"progress": False, "samples_fraction": 1.0},
                  rollout={"n": 4, "max_new_tokens": 8, "temperature": 1.0})
    out = {}
    for name, rollout_seed, data_seed in (("a", None, None), ("b", 1, None), ("c", None, 7)):
        cfg = write_config(tmp_path / name, nano_model_dir, **common,
                           run={"name": name, "output_dir": runs, "seed": 0, "data_seed": data_seed})
        assert main(["train", str(cfg), f"rollout.seed={'null' if rollout_seed is None else rollout_seed}"]) == 0
        out[name] = _samples(tmp_path / "runs" / name)
    a, b, c = out["a"], out["b"], out["c"]
    assert [(s["step"], s["uid"], s["prompt"]) for s in a] == [(s["step"], s["uid"], s["prompt"]) for s in b]
    assert [s["response"] for s in a] != [s["response"] for s in b]
    assert [s["uid"] for s in a] != [s["uid"] for s in c]

"""A reward function that raises stops the run with its traceback (issue 17 item 2)."""

from __future__ import annotations

import sys

import pytest
from rl_helpers import metrics, write_config

from rlxf.cli.main import main

BROKEN = """\
def score(sample):
    return 1 / 0 if len(sample.response) >= 0 else 1.0
"""


@pytest.fixture
def broken_reward(tmp_path, monkeypatch):
    """A config whose reward function (next to it) raises on every sample."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "broken_reward_17.py").write_text(BROKEN)
    return lambda **sections: write_config(
        tmp_path, sections.pop("model"),
        reward={"verifiers": [{"type": "broken_reward_17:score", "name": "broken"}]}, **sections)


def test_reward_that_always_raises_stops_at_the_first_step(tmp_path, nano_model_dir, broken_reward, capsys):
    assert main(["train", str(broken_reward(model=nano_model_dir))]) == 1
    err = capsys.readouterr().err
    assert "step 1: the reward failed on 16 of 16 samples" in err
    assert "ZeroDivisionError: division by zero" in err
    assert "broken_reward_17.py" in err and "line 2" in err      # the traceback, not just the type
    assert not (tmp_path / "runs" / "t").exists()               # nothing trained: nothing to keep


def test_budget_after_the_first_step(tmp_path, nano_model_dir, broken_reward, capsys):
    path = broken_reward(model=nano_model_dir, train={"steps": 3})
    assert main(["train", str(path), "reward.max_error_frac_first_step=1"]) == 1
    assert "step 2: the reward failed on 16 of 16 samples, more than reward.max_error_frac=0.5" in (
        capsys.readouterr().err)
    [row] = [r for r in metrics(tmp_path / "runs" / "t") if r.get("step", 0) > 0]  # step 1 ran
    assert row["reward/errors"] == 16
    # 1 = never stop: the run finishes, the failures are in its metrics
    assert main(["train", str(path), "reward.max_error_frac_first_step=1", "reward.max_error_frac=1",
                 "--overwrite"]) == 0

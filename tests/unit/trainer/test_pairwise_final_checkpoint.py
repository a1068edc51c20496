"""The end of an `rlxf rm` / `rlxf dpo` run: it names the model its last step saved (it looked the
newest checkpoint up again, and failed with a TypeError when that one had gone since), and a
signal in its last step lets it end as finished (it raised ``TrainingInterrupted``: exit 143 for
a run with nothing left to resume), as RL and SFT do."""

from __future__ import annotations

import logging
import math
import os
import signal

import pytest
import torch

from rlxf.config import Config
from rlxf.config.preference import DPOConfig
from rlxf.config.train import OptimConfig
from rlxf.data.preference import PreferenceData, PreferenceExample
from rlxf.run_dir import RunDir
from rlxf.trainer import pairwise
from rlxf.trainer.checkpoint import STATE_FILE, list_checkpoints
from rlxf.trainer.pairwise import PairRun, train_pairs
from rlxf.trainer.trainable import TrainableModel


class Margin(torch.nn.Module):
    """A policy reduced to one number: the log-ratio margin h of every pair, 0 at the start."""

    def __init__(self):
        super().__init__()
        self.h = torch.nn.Parameter(torch.zeros(()))


class SmallCore(TrainableModel):
    """The shared optimizer step; ``save`` writes the optimizer state only (no HF model to write)."""

    def save(self, directory, tokenizer=None):
        torch.save({"optim": self.state_dict(), "trainable": {}}, directory / "learner_state.pt")


class LogSigmoidLoss:
    """DPO's -log σ(h); ``on_call(n)`` runs at its n-th call (one per step here)."""

    prefix = "dpo"

    def __init__(self, policy: Margin, on_call):
        self.policy, self.on_call, self.calls = policy, on_call, 0

    def __call__(self, pairs):
        self.calls += 1
        self.on_call(self.calls)
        return -torch.nn.functional.logsigmoid(self.policy.h).expand(len(pairs)), {}

    def evaluate(self, pairs):
        return {}


def _train(tmp_path, steps: int, *, every: int, on_call=lambda n: None) -> tuple[dict[str, float], RunDir]:
    cfg = Config.model_validate({
        "run": {"name": "dpo", "output_dir": str(tmp_path / "runs")}, "model": {"path": str(tmp_path / "unused")},
        "data": {"task": "arithmetic"}, "checkpoint": {"every": every, "keep_last": 1}, "logging": {"progress": False},
    })
    policy = Margin()
    core = SmallCore(policy, OptimConfig(lr=0.1, warmup_steps=0, schedule="constant"), total_steps=steps)
    data = PreferenceData(train=[PreferenceExample("0", [1], [2], [3], "p", "c", "r")], test=[])
    run = RunDir.open(cfg.run.output_dir, cfg.run.name, command="dpo")
    section = DPOConfig(steps=steps, batch_size=1, micro_batch_size=1)
    return train_pairs(PairRun(core, LogSigmoidLoss(policy, on_call), data, None), cfg, section, run,
                       resume=False), run


def test_the_end_names_the_model_its_last_step_saved_even_once_it_is_gone(tmp_path, monkeypatch, caplog):
    save = pairwise.checkpoint_trainable

    def saved_then_lost(run, step, *args, **kwargs):  # its trainer state gone right after the save
        path = save(run, step, *args, **kwargs)
        (path / STATE_FILE).unlink()
        return path

    monkeypatch.setattr(pairwise, "checkpoint_trainable", saved_then_lost)
    with caplog.at_level(logging.INFO, logger="rlxf"):
        metrics, run = _train(tmp_path, 2, every=1)
    assert f"dpo: 2 steps; model in {run.checkpoints / 'step_2' / 'model'}" in caplog.text
    # step 1 at h = 0, dL/dh = -σ(0) = -1/2; Adam's first step moves h by lr: h = 0.1 at step 2
    assert metrics["dpo/loss"] == pytest.approx(math.log1p(math.exp(-0.1)), rel=1e-6)


def test_a_signal_in_the_last_step_ends_the_run_as_finished(tmp_path):
    def sigterm_in_step_2(n):
        if n == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    metrics, run = _train(tmp_path, 2, every=0, on_call=sigterm_in_step_2)
    assert metrics["dpo/loss"] == pytest.approx(math.log1p(math.exp(-0.1)), rel=1e-6)
    assert [n for n, _ in list_checkpoints(run.checkpoints)] == [2]

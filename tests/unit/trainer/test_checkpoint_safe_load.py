"""Trainer state loads with ``weights_only=True``: RNG states round-trip, crafted files do not run."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from rlxf.trainer.checkpoint import STATE_FILE, load_trainer_state, save_checkpoint, set_rng_state


def draws() -> tuple:
    return random.random(), float(np.random.rand()), float(np.random.randn()), float(torch.rand(1))


def test_rng_states_round_trip_through_a_weights_only_load(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.randn()  # leaves a cached gaussian in numpy's state: that must survive too
    state = {"step_counter": 7, "sampler": {"epoch": 1, "position": 5}}
    path = save_checkpoint(tmp_path, 7, write=lambda d: None, state=state, keep_last=2)
    expected = draws()
    draws()  # move every generator on
    loaded = load_trainer_state(path)
    set_rng_state(loaded["rng"])
    assert draws() == expected
    assert loaded["step"] == 7 and loaded["sampler"] == {"epoch": 1, "position": 5}


class _Payload:
    def __reduce__(self):
        return os.system, ("touch pwned",)


def test_a_crafted_checkpoint_is_refused_without_running_its_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "step_1"
    ckpt.mkdir()
    torch.save({"step": 1, "rng": _Payload()}, ckpt / STATE_FILE)
    with pytest.raises(ValueError, match="could run code"):
        load_trainer_state(ckpt)
    assert not (tmp_path / "pwned").exists()

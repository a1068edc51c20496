"""The local placement's start: what it started before a later part failed is closed again."""

from __future__ import annotations

import multiprocessing

import pytest
from rl_helpers import write_config

from rlxf.config import load_config
from rlxf.placement import local


def _engines() -> set[int]:
    return {p.pid for p in multiprocessing.active_children() if p.name == "rlxf-engine"}


def test_a_reward_that_fails_to_build_leaves_no_engine_process_running(tmp_path, nano_model_dir, monkeypatch):
    """rollout.mode: async starts the engine's process before the reward is built: a reward that
    failed (a judge's endpoint down) left that process and its copy of the model running until
    the interpreter exited, one more with every retry in a notebook."""
    def unreachable(cfg):
        raise ConnectionError("judge endpoint unreachable")

    monkeypatch.setattr(local, "build_run_reward", unreachable)
    cfg = load_config(write_config(tmp_path, nano_model_dir, rollout={"n": 2, "max_new_tokens": 4, "mode": "async"}))
    before = _engines()
    with pytest.raises(ConnectionError, match="judge endpoint unreachable"):
        local.LocalPlacement.from_config(cfg)
    assert _engines() == before

"""placement.build: only in-memory objects that are actually given are refused outside `local`."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from rlxf import placement
from rlxf.config import load_config

EXAMPLE = Path(__file__).parents[2] / "examples" / "grpo_arithmetic.yaml"


@pytest.fixture
def ray_cfg(monkeypatch):
    """A ray-placement config and a stand-in RayPlacement (Ray itself is never started)."""
    built = []
    fake = types.ModuleType("rlxf.placement.ray")
    fake.RayPlacement = lambda cfg: built.append(cfg) or "ray placement"
    monkeypatch.setitem(sys.modules, "rlxf.placement.ray", fake)
    return load_config(EXAMPLE, ["run.placement=ray"]), built


def test_ray_placement_accepts_absent_objects(ray_cfg):
    cfg, built = ray_cfg
    # rlxf.train without reward functions passed reward=None; that must not count as an object
    assert placement.build(cfg, reward=None) == "ray placement"
    assert placement.build(cfg, model=None, tokenizer=None, reward=None) == "ray placement"
    assert placement.build(cfg) == "ray placement"
    assert len(built) == 3


def test_ray_placement_refuses_in_memory_objects(ray_cfg):
    cfg, built = ray_cfg
    with pytest.raises(ValueError, match="only in the local placement"):
        placement.build(cfg, reward=object())
    with pytest.raises(ValueError, match="only in the local placement"):
        placement.build(cfg, model=object(), tokenizer=object(), reward=None)
    assert built == []


def test_api_passes_no_none_objects(tmp_path, monkeypatch):
    """rlxf.train with a config-only reward hands run_training no `reward=None`."""
    import rlxf
    import rlxf.api

    seen = {}

    def fake_run(cfg, run_dir, resume, prepare):
        seen.update(placement=cfg.run.placement, objects=prepare())

    monkeypatch.setattr(rlxf.api, "_run", fake_run)
    monkeypatch.chdir(tmp_path)
    rlxf.train(str(EXAMPLE), run={"name": "t", "placement": "ray", "output_dir": str(tmp_path)})
    assert seen == {"placement": "ray", "objects": {}}

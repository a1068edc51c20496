"""RL with a LoRA actor (issue 17 item 1): the engines get the merged weights on every sync."""

from __future__ import annotations

import pytest
import torch
from rl_helpers import metrics, write_config

from rlxf.cli.main import main
from rlxf.config import load_config
from rlxf.data import build_prompt_data
from rlxf.placement.local import LocalPlacement
from rlxf.rollout import SamplingParams

pytest.importorskip("peft")


def _step(placement, prompts, sampling, step: int) -> float:
    """One rollout + update; the engine/trainer log-prob gap of its samples."""
    trajs = placement.generate(prompts, list(range(len(prompts))), sampling)
    placement.score(trajs, sampling.max_new_tokens)
    exp, _ = placement.make_experience(trajs)
    return placement.update(exp, step)["rollout/logprob_gap_max"]


@pytest.mark.parametrize("backend", ["native", "hf"])
def test_lora_actor_syncs_merged_weights_to_either_engine(tmp_path, nano_model_dir, backend):
    cfg = load_config(write_config(tmp_path, nano_model_dir), ["model.lora.r=8", f"rollout.backend={backend}"])
    with LocalPlacement.from_config(cfg) as placement:
        prompts = build_prompt_data(cfg.data, placement.tokenizer, seed=0).train[:4]
        sampling = SamplingParams.from_config(cfg.rollout)
        # a large adapter delta (B starts at zero), so stale engine weights show in the gap
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, param in placement.learner.actor.model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
        stale = _step(placement, prompts, sampling, step=1)
        placement.sync_weights(1)
        synced = _step(placement, prompts, sampling, step=2)
    assert stale > 1e-2          # the engine still had the base weights
    assert synced < 1e-3         # it now samples from base + LoRA delta (CPU fp32: ~1e-6)


def test_lora_rl_run_from_the_command_line(tmp_path, nano_model_dir):
    path = write_config(tmp_path, nano_model_dir, train={"steps": 2}, checkpoint={"every": 2})
    assert main(["train", str(path), "model.lora.r=8"]) == 0
    rows = [r for r in metrics(tmp_path / "runs" / "t") if r.get("step", 0) > 0]
    assert len(rows) == 2 and rows[-1]["rollout/logprob_gap_max"] < 1e-3
    assert (tmp_path / "runs" / "t" / "checkpoints" / "step_2" / "model" / "config.json").exists()

"""`rlxf dpo`: log 2 at step 0, learning the hidden preference, LoRA's reference, resume."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from pref_helpers import pair_config, read_metrics
from safetensors.torch import load_file

from rlxf.cli.main import main


def test_dpo_starts_at_log2_and_raises_the_margin(tmp_path, nano_model_dir):
    path = pair_config(tmp_path, nano_model_dir, "dpo", {"steps": 8, "batch_size": 8, "micro_batch_size": 8,
                                                         "beta": 0.5, "optim": {"lr": 3e-3}})
    assert main(["dpo", str(path)]) == 0
    records = read_metrics(tmp_path / "runs" / "dpo")
    start, first, final = records[0], records[1], records[-1]
    # policy = reference: h = 0 on every pair, so -log σ(0) = log 2 held out and at the first step
    assert start["eval/dpo/loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert first["dpo/loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert start["eval/dpo/reward_margin"] == pytest.approx(0.0, abs=1e-4)
    assert final["step"] == 8
    assert final["eval/dpo/reward_margin"] > 0.5 and final["eval/dpo/reward_accuracy"] >= 0.8, final
    assert final["eval/dpo/loss"] < math.log(2) - 0.1
    assert {"dpo/logps_chosen", "dpo/logps_rejected", "dpo/reward_chosen", "dpo/reward_rejected"} <= set(final)


def test_dpo_with_lora_uses_the_base_model_as_reference(tmp_path, nano_model_dir):
    pytest.importorskip("peft")
    path = pair_config(tmp_path, nano_model_dir, "dpo", {"steps": 3, "batch_size": 8, "micro_batch_size": 8,
                                                         "beta": 0.5, "optim": {"lr": 1e-2}},
                       n_train=16, n_test=8)
    assert main(["dpo", str(path), "model.lora.r=4", "model.lora.alpha=8"]) == 0
    records = read_metrics(tmp_path / "runs" / "dpo")
    # a new adapter (B = 0) leaves the model the base model: log 2; then the adapter learns
    assert records[1]["dpo/loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert records[-1]["dpo/loss"] < math.log(2)


def test_dpo_resume_is_bit_exact(tmp_path, nano_model_dir):
    path = pair_config(tmp_path, nano_model_dir, "dpo", {"steps": 4, "batch_size": 8, "micro_batch_size": 4,
                                                         "loss": "ipo", "optim": {"lr": 1e-3}},
                       n_train=24, n_test=8, checkpoint={"every": 2, "keep_last": 3})
    assert main(["dpo", str(path)]) == 0
    run = tmp_path / "runs" / "dpo"
    final = run / "checkpoints" / "step_4" / "model"   # the one run layout: no <run>/model
    assert not (run / "model").exists()
    straight = load_file(str(final / "model.safetensors"))
    shutil.rmtree(run / "checkpoints" / "step_4")
    assert main(["dpo", str(path), "--resume"]) == 0
    resumed = load_file(str(final / "model.safetensors"))
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)

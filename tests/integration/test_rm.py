"""`rlxf rm`: a Bradley–Terry reward model learns a hidden preference, loads as the
`reward_model` verifier and as a critic, and resumes bit for bit."""

from __future__ import annotations

import json
import shutil

import torch
from pref_helpers import pair_config, read_metrics
from safetensors.torch import load_file

from rlxf.cli.main import main
from rlxf.models import ValueModel, load_tokenizer
from rlxf.rewards import RewardInput
from rlxf.rewards.reward_model import RewardModelVerifier


def test_rm_beats_chance_on_held_out_pairs_and_loads_as_verifier_and_critic(tmp_path, nano_model_dir):
    path = pair_config(tmp_path, nano_model_dir, "rm", {"steps": 10, "batch_size": 8, "micro_batch_size": 8,
                                                        "margin": 0.5, "optim": {"lr": 3e-3}})
    assert main(["rm", str(path)]) == 0
    run = tmp_path / "runs" / "rm"
    records = read_metrics(run)
    # a zero head scores every response 0: no pair is ranked right before training
    assert records[0]["step"] == 0 and records[0]["eval/rm/reward_accuracy"] == 0.0
    final = records[-1]
    assert final["step"] == 10
    assert final["eval/rm/reward_accuracy"] >= 0.8, final        # 32 held-out pairs; chance is 0.5
    assert final["eval/rm/reward_margin"] > 0 and final["rm/loss"] < records[1]["rm/loss"]

    verifier = RewardModelVerifier("rm", ValueModel.from_pretrained(run / "model", device="cpu"),
                                   load_tokenizer(run / "model"))
    test = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    # raw prompt text, not the chat-templated one it was trained on: the rule is in the response
    chosen = verifier.score_batch([RewardInput(prompt=t["prompt"], response=t["chosen"]) for t in test])
    rejected = verifier.score_batch([RewardInput(prompt=t["prompt"], response=t["rejected"]) for t in test])
    wins = sum(c.score > r.score for c, r in zip(chosen, rejected, strict=True))
    assert wins >= 0.7 * len(test), wins

    critic = ValueModel.from_pretrained(run / "model", device="cpu")   # PPO's critic.path
    head = load_file(str(run / "model" / "value_head.safetensors"))
    assert torch.equal(critic.value_head.weight.detach(), head["weight"]) and head["weight"].abs().sum() > 0


def test_rm_resume_is_bit_exact(tmp_path, nano_model_dir):
    path = pair_config(tmp_path, nano_model_dir, "rm", {"steps": 4, "batch_size": 8, "micro_batch_size": 4,
                                                        "optim": {"lr": 1e-3, "schedule": "cosine", "warmup_steps": 1}},
                       checkpoint={"every": 2, "keep_last": 3})
    assert main(["rm", str(path)]) == 0
    run = tmp_path / "runs" / "rm"
    straight = load_file(str(run / "model" / "model.safetensors"))
    straight_head = load_file(str(run / "model" / "value_head.safetensors"))
    straight_metrics = read_metrics(run)
    # as if killed after step 2's checkpoint
    shutil.rmtree(run / "checkpoints" / "step_4")
    shutil.rmtree(run / "model")
    assert main(["rm", str(path), "--resume"]) == 0
    resumed = load_file(str(run / "model" / "model.safetensors"))
    resumed_head = load_file(str(run / "model" / "value_head.safetensors"))
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    assert all(torch.equal(straight_head[k], resumed_head[k]) for k in straight_head)
    drop = ("time/train",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(run)] == \
        [{k: v for k, v in r.items() if k not in drop} for r in straight_metrics]

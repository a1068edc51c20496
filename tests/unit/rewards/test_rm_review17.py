"""Reward-model verifier: an abandoned forward stops at its next layer, so it does not eat the
next call's reward.timeout_s; a pair is cut with the limits its `rlxf rm` run cut training pairs."""

from __future__ import annotations

import copy
import json
import logging
import time

import pytest
import torch
import yaml

from rlxf.config.data import DataConfig
from rlxf.config.reward import RewardConfig, RewardModelVerifierConfig
from rlxf.data import build_preference_data
from rlxf.models import ValueModel, load_tokenizer
from rlxf.rewards import LocalReward, RewardInput
from rlxf.rewards.reward_model import RewardModelVerifier, training_limits


class Paused(torch.nn.Module):
    """A decoder layer that first sleeps 0.1 s on sequences of 16 tokens or more."""

    def __init__(self, layer: torch.nn.Module, log: list[int]):
        super().__init__()
        self.layer, self.log = layer, log

    def forward(self, hidden, *args, **kwargs):
        self.log.append(hidden.shape[1])
        if hidden.shape[1] >= 16:
            time.sleep(0.1)
        return self.layer(hidden, *args, **kwargs)


def _deep(model: ValueModel, depth: int, log: list[int]) -> ValueModel:
    """``model`` with ``depth`` decoder layers (copies of its first), each ``Paused``."""
    inner = model.trunk   # the bare decoder (Qwen2Model)
    inner.layers = torch.nn.ModuleList(Paused(copy.deepcopy(inner.layers[0]), log) for _ in range(depth))
    inner.config.num_hidden_layers = depth
    inner.config.layer_types = [inner.config.layer_types[0]] * depth
    return model


def test_a_forward_abandoned_at_its_timeout_does_not_time_out_the_next_call(nano_model_dir):
    log = []
    model = _deep(ValueModel.from_pretrained(nano_model_dir, device="cpu"), 30, log)
    verifier = RewardModelVerifier("rm", model, load_tokenizer(nano_model_dir), batch_size=1)
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "reward_model", "path": "unused", "name": "rm"}],
                                       "timeout_s": 0.5})
    scorer = LocalReward(cfg, verifiers={"rm": verifier})
    try:
        first = scorer.score([RewardInput("q", " ".join(["word"] * 40))])   # 30 layers x 0.1 s: a 3 s forward
        assert first[0].failures["rm"].kind == "timeout"
        second = scorer.score([RewardInput("q", "b")])   # old: waited ~2.5 s for the first forward
        assert not second[0].failures, second[0].failures
    finally:
        scorer.close()
    long_layers = sum(1 for n in log if n >= 16)
    assert long_layers < 15   # the first forward stopped soon after its timeout, not after all 30 layers
    plain = RewardModelVerifier("plain", _deep(ValueModel.from_pretrained(nano_model_dir, device="cpu"), 30, []),
                                load_tokenizer(nano_model_dir))
    assert second[0].scores["rm"] == pytest.approx(plain.score(RewardInput("q", "b")).score, abs=1e-5)
    plain.close()


PROMPT = "what is six times seven, asked in a rather long way?"
CHOSEN = "first we add the tens then the units and so the answer is forty two"
REJECTED = "first we guess a number then we write it down and the answer is nine"


def _rm_run(tmp_path, nano_model_dir, data: dict) -> tuple:
    """A run directory of `rlxf rm` (run.json, config.yaml with ``data``) holding the nano model."""
    run = tmp_path / "runs" / "rm"
    ValueModel.from_pretrained(nano_model_dir, device="cpu").save_pretrained(
        run / "checkpoints" / "step_1" / "model", tokenizer=load_tokenizer(nano_model_dir))
    (run / "run.json").write_text(json.dumps({"command": "rm"}) + "\n")
    (run / "config.yaml").write_text(yaml.safe_dump({"data": data}))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}) + "\n")
    return run, pairs


def test_the_verifier_cuts_a_pair_as_its_rm_run_cut_the_training_pairs(tmp_path, nano_model_dir):
    limits = {"max_prompt_len": 4, "max_response_len": 6}
    run, pairs = _rm_run(tmp_path, nano_model_dir, {**limits, "apply_chat_template": False})
    tok = load_tokenizer(run)
    cfg = DataConfig(source="jsonl", train_path=str(pairs), overlong_prompt="truncate", apply_chat_template=False,
                     **limits)
    [pair] = build_preference_data(cfg, tok, 0, keep_response="last").train
    assert len(pair.prompt_ids) == 4 and len(pair.chosen_ids) == 6   # both were cut in training
    for path in (run, run / "checkpoints" / "step_1" / "model"):
        verifier = RewardModelVerifier.from_config(RewardModelVerifierConfig(path=str(path), device="cpu"))
        assert verifier._ids(RewardInput(PROMPT, CHOSEN)) == (pair.prompt_ids, pair.chosen_ids)
        assert verifier._ids(RewardInput(PROMPT, REJECTED)) == (pair.prompt_ids, pair.rejected_ids)
        verifier.close()


def test_a_loose_model_directory_has_no_training_limits_and_a_short_max_length_is_named(
        tmp_path, nano_model_dir, caplog):
    assert training_limits(nano_model_dir) == (None, None)
    run, _ = _rm_run(tmp_path, nano_model_dir, {"max_prompt_len": 40, "max_response_len": 30})
    assert training_limits(run) == (40, 30)
    (run / "run.json").write_text(json.dumps({"command": "sft"}) + "\n")
    assert training_limits(run) == (None, None)   # only an rlxf rm run's limits are the RM's
    with caplog.at_level(logging.WARNING, logger="rlxf.rewards.reward_model"):
        RewardModelVerifier("rm", torch.nn.Identity(), load_tokenizer(nano_model_dir), max_length=50,
                            max_prompt_len=40, max_response_len=30)
    assert "max_length is 50" in caplog.text and "set max_length to 70" in caplog.text

"""A reward model reads its score at the eos that ends a response. An over-long response must be cut
the same way in `rlxf rm` training and in the reward_model verifier: keeping its end (and eos), so
the same pair gives the RM the same tokens, and the same score, in both."""

from __future__ import annotations

import json

import torch
import yaml

from rlxf.cli.main import main
from rlxf.config.data import DataConfig
from rlxf.data import build_preference_data
from rlxf.data.templates import encode_response
from rlxf.models import ValueModel, load_tokenizer
from rlxf.rewards import RewardInput
from rlxf.rewards.reward_model import STATS_FILE, RewardModelVerifier

LONG_CHOSEN = "first we add the tens then the units and so the answer is forty two"
LONG_REJECTED = "first we guess a number then we write it down and the answer is nine"
R = 8   # data.max_response_len; the prompt keeps 1 token, so the verifier's max_length is 1 + R


def _pairs(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "what is 6 times 7?", "chosen": LONG_CHOSEN,
                                "rejected": LONG_REJECTED}) + "\n")
    return path


def _templated(tok) -> str:
    """The prompt as the policy's rollouts hold it: chat-templated, ending with the generation prompt."""
    return tok.apply_chat_template([{"role": "user", "content": "what is 6 times 7?"}], tokenize=False,
                                   add_generation_prompt=True)


def test_training_and_scoring_feed_the_rm_the_same_tokens_for_an_overlong_pair(tmp_path, tokenizer_for_tests):
    tok = tokenizer_for_tests
    cfg = DataConfig(source="jsonl", train_path=str(_pairs(tmp_path)), max_prompt_len=1, max_response_len=R,
                     overlong_prompt="truncate")
    [pair] = build_preference_data(cfg, tok, 0, keep_response="last").train
    verifier = RewardModelVerifier("rm", torch.nn.Identity(), tok, max_length=1 + R)   # _ids needs no model
    prompt = _templated(tok)
    assert verifier._ids(RewardInput(prompt, LONG_CHOSEN)) == (pair.prompt_ids, pair.chosen_ids)
    assert verifier._ids(RewardInput(prompt, LONG_REJECTED)) == (pair.prompt_ids, pair.rejected_ids)
    assert pair.chosen_ids == encode_response(tok, LONG_CHOSEN)[-R:] and pair.chosen_ids[-1] == tok.eos_token_id
    # DPO's policy continues the prompt: its pairs keep the response's start
    [dpo] = build_preference_data(cfg, tok, 0).train
    assert dpo.chosen_ids == encode_response(tok, LONG_CHOSEN)[:R]


def test_rlxf_rm_trains_on_the_cut_the_verifier_scores(tmp_path, nano_model_dir):
    """reward_stats.json holds the trained RM's scores on its training responses, as `rlxf rm` cut
    them; the verifier scoring the same texts must find the same mean and spread."""
    config = {
        "run": {"name": "rm", "output_dir": str(tmp_path / "runs"), "seed": 0},
        "model": {"path": str(nano_model_dir)},
        "data": {"source": "jsonl", "train_path": str(_pairs(tmp_path)), "max_prompt_len": 1,
                 "max_response_len": R, "overlong_prompt": "truncate", "fields": {"ground_truth": None}},
        "rm": {"steps": 1, "batch_size": 1, "micro_batch_size": 1, "optim": {"lr": 0.05}},
        "logging": {"progress": False},
    }
    (tmp_path / "rm.yaml").write_text(yaml.safe_dump(config))
    assert main(["rm", str(tmp_path / "rm.yaml")]) == 0
    run = tmp_path / "runs" / "rm"
    stats = json.loads((run / "checkpoints" / "step_1" / "model" / STATS_FILE).read_text())
    tok = load_tokenizer(run)
    verifier = RewardModelVerifier("rm", ValueModel.from_pretrained(run, device="cpu"), tok, max_length=1 + R)
    prompt = _templated(tok)
    chosen, rejected = (r.score for r in verifier.score_batch([RewardInput(prompt, LONG_CHOSEN),
                                                               RewardInput(prompt, LONG_REJECTED)]))
    assert chosen != rejected   # the trained head tells them apart, so the check below can fail
    assert abs(stats["mean"] - (chosen + rejected) / 2) < 1e-4
    assert abs(stats["std"] - abs(chosen - rejected) / 2) < 1e-4

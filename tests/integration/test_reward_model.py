"""The reward-model verifier on the built-in nano model with a value head set by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.config.reward import RewardConfig
from rlxf.data.templates import encode_response
from rlxf.models import ValueModel, load_tokenizer, sequence_scores
from rlxf.rewards import LocalReward, RewardInput
from rlxf.rewards.reward_model import RewardModelVerifier


@pytest.fixture(scope="module")
def rm_dir(nano_model_dir, tmp_path_factory):
    """The nano trunk with a fixed random head, saved as a reward model."""
    model = ValueModel.from_pretrained(nano_model_dir, device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        model.value_head.weight.normal_(0, 1.0)
        model.value_head.bias.fill_(0.25)
    out = tmp_path_factory.mktemp("rm") / "rm"
    model.save_pretrained(out, tokenizer=load_tokenizer(nano_model_dir))
    return out


def samples():
    return [RewardInput("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n", r, "4")
            for r in ("4", "The answer is 4.", "five", "I think it is 22, no wait, 4", "4 4 4 4")]


def test_scores_equal_the_value_head_at_the_eos_after_the_response_in_any_batching(rm_dir):
    """The layout `rlxf rm` trains on (response + eos, score at the eos), whatever the batching."""
    model, tok = ValueModel.from_pretrained(rm_dir, device="cpu"), load_tokenizer(rm_dir)
    xs = samples()
    prompts = [tok(x.prompt, add_special_tokens=False)["input_ids"] for x in xs]
    responses = [tok(x.response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for x in xs]
    with torch.no_grad():
        want = sequence_scores(model, prompts, responses).tolist()
    assert len(set(round(w, 4) for w in want)) == len(want)  # the head tells the responses apart
    one = RewardModelVerifier("rm", model, tok, batch_size=1).score_batch(xs)
    many = RewardModelVerifier("rm", model, tok, batch_size=16).score_batch(xs)
    assert [r.score for r in one] == pytest.approx(want, abs=1e-4)
    assert [r.score for r in many] == pytest.approx(want, abs=1e-4)
    assert [r.metrics["raw"] for r in one] == pytest.approx(want, abs=1e-4)


def test_zero_head_gives_the_bias_and_sigmoid_normalises(nano_model_dir):
    model, tok = ValueModel.from_pretrained(nano_model_dir, device="cpu"), load_tokenizer(nano_model_dir)
    with torch.no_grad():
        model.value_head.bias.fill_(0.7)  # w = 0: r(x, y) = b for every pair
    plain = RewardModelVerifier("rm", model, tok).score_batch(samples())
    squashed = RewardModelVerifier("rm", model, tok, normalize="sigmoid").score_batch(samples())
    assert [r.score for r in plain] == pytest.approx([0.7] * 5)
    assert [r.score for r in squashed] == pytest.approx([1 / (1 + math.exp(-0.7))] * 5)


def test_long_pairs_keep_the_response_and_cut_the_prompt_from_the_left(rm_dir):
    model, tok = ValueModel.from_pretrained(rm_dir, device="cpu"), load_tokenizer(rm_dir)
    v = RewardModelVerifier("rm", model, tok, max_length=12)
    long = RewardInput("word " * 50, "final answer 4", "4")
    p, r = v._ids(long)
    assert r == encode_response(tok, "final answer 4")
    assert len(p) + len(r) == 12 and p == tok("word " * 50, add_special_tokens=False)["input_ids"][-len(p):]
    huge = v._ids(RewardInput("x", "y " * 40, None))
    assert len(huge[0]) == 1 and len(huge[0]) + len(huge[1]) == 12


def test_reward_model_from_config(rm_dir):
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "reward_model", "path": str(rm_dir), "device": "cpu",
                                                      "batch_size": 2}, {"type": "math", "weight": 0.0}],
                                       "accuracy": "math"})
    with LocalReward(cfg) as scorer:
        out = scorer.score(samples())
    direct = RewardModelVerifier.from_config(cfg.verifiers[0]).score_batch(samples())
    assert [s.scores["reward_model"] for s in out] == pytest.approx([d.score for d in direct], abs=1e-5)
    assert [s.correct for s in out] == [True, True, False, True, True]
    assert [s.reward for s in out] == pytest.approx([d.score for d in direct], abs=1e-5)

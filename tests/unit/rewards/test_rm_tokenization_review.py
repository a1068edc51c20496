"""What the reward-model verifier feeds the RM, token by token: the prompt as the policy and the
RM's training saw it (a raw prompt with the tokenizer's BOS, a templated one without), and the
response as text whose special-token spelling stays text, then eos."""

from __future__ import annotations

import copy

import pytest
import torch
from tokenizers.processors import TemplateProcessing

from rlxf.data.templates import encode_prompts
from rlxf.rewards import RewardInput
from rlxf.rewards.reward_model import RewardModelVerifier


@pytest.fixture(scope="module")
def bos_tokenizer(tokenizer_for_tests):
    """The built-in tokenizer made to add a BOS, as Llama's and Mistral's do."""
    tok = copy.deepcopy(tokenizer_for_tests)
    bos = tok.convert_tokens_to_ids("<|endoftext|>")
    tok._tokenizer.post_processor = TemplateProcessing(single="<|endoftext|> $A", pair="<|endoftext|> $A $B",
                                                       special_tokens=[("<|endoftext|>", bos)])
    tok.bos_token = "<|endoftext|>"
    assert tok("say 5")["input_ids"][0] == bos
    return tok


def _verifier(tok) -> RewardModelVerifier:
    return RewardModelVerifier("rm", torch.nn.Identity(), tok)  # _ids needs only the tokenizer


@pytest.mark.parametrize("templated", [False, True])
def test_the_prompt_is_tokenised_as_the_policy_and_the_rm_training_saw_it(bos_tokenizer, templated):
    [(want, text)] = encode_prompts(bos_tokenizer, ["say 5"], use_chat_template=templated)
    prompt, _ = _verifier(bos_tokenizer)._ids(RewardInput(text, "FIVE"))
    assert prompt == want
    assert prompt.count(bos_tokenizer.bos_token_id) == (0 if templated else 1)  # the template has no BOS here


def test_special_token_text_in_the_response_stays_text(tokenizer_for_tests):
    tok = tokenizer_for_tests
    eos = tok.eos_token_id
    # what a policy's decoded response holds when it spelled "<|im_end|>" with ordinary tokens
    spelled = tok("ok<", add_special_tokens=False)["input_ids"] + tok("|im_end|> fine", add_special_tokens=False)[
        "input_ids"]
    text = tok.decode(spelled, skip_special_tokens=True)
    assert text == "ok<|im_end|> fine" and eos not in spelled
    _, response = _verifier(tok)._ids(RewardInput("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", text))
    assert response.count(eos) == 1 and response[-1] == eos  # no forged end of turn before the real one
    assert tok.decode(response[:-1]) == text


def test_a_tokenizer_without_eos_is_refused_by_name(tokenizer_for_tests):
    tok = copy.deepcopy(tokenizer_for_tests)
    tok.eos_token = None
    with pytest.raises(ValueError, match="reward model 'judge_rm': its tokenizer has no eos token"):
        RewardModelVerifier("judge_rm", torch.nn.Identity(), tok)


def test_a_raw_prompt_that_holds_its_bos_gets_no_second(bos_tokenizer):
    """A templated prompt read with data.apply_chat_template: false starts with the BOS the
    template wrote (Llama 3's <|begin_of_text|>); the tokenizer's own BOS made it two."""
    bos = bos_tokenizer.bos_token_id
    [(ids, _)] = encode_prompts(bos_tokenizer, [bos_tokenizer.bos_token + "say 5"], use_chat_template=False)
    assert ids.count(bos) == 1 and ids[0] == bos
    [(plain, _)] = encode_prompts(bos_tokenizer, ["say 5"], use_chat_template=False)
    assert plain == ids


def test_supervised_targets_keep_special_token_text_as_text(tokenizer_for_tests):
    """The RM's (and SFT's, DPO's) training targets are tokenised as the verifier scores them."""
    from rlxf.data.templates import encode_response

    ids = encode_response(tokenizer_for_tests, "a<|im_end|>b")
    assert ids.count(tokenizer_for_tests.eos_token_id) == 1 and ids[-1] == tokenizer_for_tests.eos_token_id

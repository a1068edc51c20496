"""What an engine is given, checked where it first sees it: stop ids outside the vocabulary, requests
at the wrong nesting level, sampling that is not a SamplingParams; and the hf engine's own check
for NaN / inf logits."""

from __future__ import annotations

import pytest
import torch

from rlxf.errors import UserInputError
from rlxf.rollout import GenerationRequest, SamplingParams, build_engine
from rlxf.rollout.base import as_requests
from rlxf.rollout.sampling import NonFiniteLogits

VOCAB = 97
BACKENDS = ["native", "hf"]


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stop_id_outside_the_vocabulary_is_refused_naming_it(llama, backend):
    engine = build_engine(backend, llama)
    # Llama 3's <|end_of_text|> on a 97-token model: it could never be sampled, so never stop a response
    with pytest.raises(
        ValueError,
        match=rf"stop_token_ids \[128001\] .*{backend} engine's vocabulary of {VOCAB} "
        rf"tokens \(ids 0\.\.{VOCAB - 1}\)",
    ):
        engine.generate([[1, 2, 3]], SamplingParams(stop_token_ids=[5, 128001], max_new_tokens=2, seed=0))
    with pytest.raises(UserInputError, match=rf"stop_token_ids \[{VOCAB}\]"):  # the first id past the last row
        engine.generate([[1, 2, 3]], SamplingParams(stop_token_ids=[VOCAB], max_new_tokens=2, seed=0))
    out = engine.generate([[1, 2, 3]], SamplingParams(stop_token_ids=[VOCAB - 1], max_new_tokens=2, seed=0))
    assert len(out[0][0].response_ids) >= 1  # the last id is a token like any other


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampling_that_is_not_sampling_params_is_refused_naming_the_type(llama, backend):
    engine = build_engine(backend, llama)
    with pytest.raises(
        TypeError, match=r"SamplingParams .*\(got dict\)"
    ):  # was: 'dict' has no attribute 'seed'
        engine.generate([[1, 2, 3]], {"max_new_tokens": 2})


@pytest.mark.parametrize("requests", [[1, 2, 3], torch.tensor([1, 2, 3])])
def test_one_prompts_ids_given_as_the_list_of_requests_is_refused(requests):
    # a 1-D tensor became three one-token prompts; a list said "tokenize the prompt first"
    with pytest.raises(ValueError, match=r"request 0: .*\(got a single token id, 1\).*generate\(\[ids\]"):
        as_requests(requests)


def test_a_request_tensor_holding_several_prompts_is_refused():
    # reshape(-1) joined the two rows into one prompt [1, 2, 3, 4]
    with pytest.raises(ValueError, match=r"request 1 is a tensor of shape \(2, 2\)"):
        as_requests([[5], torch.tensor([[1, 2], [3, 4]])])
    assert [r.prompt_ids for r in as_requests([torch.tensor([[1, 2]]), torch.tensor([3])])] == [[1, 2], [3]]


def test_hf_finds_non_finite_logits_itself_not_from_torchs_error_text(llama, monkeypatch):
    with torch.no_grad():
        bad = llama.__class__(llama.config).eval()
        bad.load_state_dict(llama.state_dict())
        bad.lm_head.weight[7] = float("inf")  # +inf times a hidden state: a +inf or NaN logit for token 7
    engine = build_engine("hf", bad)
    multinomial = torch.multinomial

    def reworded(probs, *args, **kwargs):  # a torch release that words the failure its own way
        if not torch.isfinite(probs).all():
            raise RuntimeError("invalid multinomial distribution")
        return multinomial(probs, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", reworded)
    with pytest.raises(
        NonFiniteLogits, match=r"^hf engine \(policy version 0\), response token \[0\]: .*NaN or \+inf"
    ):
        engine.generate(
            [GenerationRequest([1, 2, 3], seed=0)], SamplingParams(max_new_tokens=3, ignore_eos=True)
        )


def test_hf_names_the_response_token_whose_logits_are_not_finite(llama):
    engine = build_engine("hf", llama)
    calls = []

    def nan_from_the_third_forward(module, args, output):
        calls.append(1)
        return output.fill_(float("nan")) if len(calls) >= 3 else output

    engine.model.lm_head.register_forward_hook(nan_from_the_third_forward)
    with pytest.raises(
        NonFiniteLogits,
        match=r"^hf engine \(policy version 0\), response token \[2\]: "
        r"the model's logits hold NaN or \+inf in rows \[0\]",
    ):
        engine.generate([[1, 2, 3]], SamplingParams(temperature=0.0, max_new_tokens=5, ignore_eos=True))



def test_an_engine_process_refuses_a_stop_id_outside_the_vocabulary_in_the_caller(forked_engine):
    """Refused only inside the engine process, it came back as a failed engine (EngineLost) that
    every later call raised too; the caller's process refuses it and the engine stays usable."""
    engine = forked_engine()
    with pytest.raises(ValueError, match=r"stop_token_ids \[128001\] .*forked \(in its own process\) engine"):
        engine.generate([[1, 2, 3]], SamplingParams(stop_token_ids=[128001], max_new_tokens=2))
    assert engine.generate([[1, 2, 3]], SamplingParams(stop_token_ids=[999], max_new_tokens=2)) == [[]]

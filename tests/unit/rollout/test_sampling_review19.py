"""Review 19: inverse-CDF sampling never leaves the allowed set, and the rollout API's public
constructors (sampling parameters, engine options, requests) refuse values of the wrong type
instead of misreading them, and non-finite logits stop a call with their likely cause."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlxf.rollout import EngineOptions, GenerationRequest, SamplingParams, build_engine
from rlxf.rollout.base import as_requests
from rlxf.rollout.sampling import BLOCK, NonFiniteLogits, _sample_full, sample_tokens


def test_the_full_vocabulary_sampler_never_draws_a_zero_probability_token():
    # mass a on token 0 (block 0), nothing on token 64, m on token 65 (block 1), the rest on 128.
    # float32: block_cdf[1] - block_mass[1] rounds above block_cdf[0] = a, so the old sampler,
    # searching u * total = a against that start, drew token 64 (probability 0).
    a, m = 0.014706305228173733, 0.0008636401034891605
    probs = torch.zeros(1, 3 * BLOCK)
    probs[0, 0], probs[0, BLOCK + 1] = a, m
    probs[0, 2 * BLOCK] = 1.0 - probs[0, 0] - probs[0, BLOCK + 1]
    blocks = probs.view(1, -1, BLOCK).sum(-1)
    assert blocks.cumsum(-1)[0, 1] - blocks[0, 1] > blocks[0, 0]   # the rounding the case needs
    # u * total == a exactly: the mass below it is a, so the next token with mass is drawn
    assert _sample_full(probs, torch.tensor([a], dtype=torch.float64)).item() == BLOCK + 1
    assert _sample_full(probs, torch.tensor([a * 0.999], dtype=torch.float64)).item() == 0


def test_a_draw_near_one_stays_inside_the_top_p_nucleus():
    # sorted by logit: tokens 1 (3.0), 3 (2.9), 9 (2.1), 6 (1.7), ...; with top_p 0.77 the
    # nucleus is {1, 3, 9}: the mass before token 6 is > 0.77. The old sampler bounded u by a
    # separately summed nucleus mass one ulp above the cumulative sum, and u -> 1 drew token 6.
    logits = torch.tensor([[-2.2, 3.0, 0.5, 2.9, -1.6, -1.0, 1.7, -5.5, -2.1, 2.1, 0.9]])
    p = torch.softmax(logits.double(), -1)[0]
    assert p[[1, 3]].sum() < 0.77 <= p[[1, 3, 9]].sum()
    u = torch.tensor([1 - 2**-53], dtype=torch.float64)
    for top_k in (0, 5):   # the top-k path applies the same nucleus to its renormalised top 5
        token, _ = sample_tokens(logits, u, temperature=1.0, top_p=0.77, top_k=top_k)
        assert token.item() == 9


def test_a_lone_stop_string_or_stop_id_is_one_not_one_per_character():
    # before: stop_strings="</answer>" became ("<", "/", "a", ...), ending at the first "a";
    # stop_token_ids=5 failed with "'int' object is not iterable"
    sp = SamplingParams(stop_strings="</answer>", stop_token_ids=5)
    assert sp.stop_strings == ("</answer>",) and sp.stop_token_ids == (5,)
    assert SamplingParams(stop_strings=["a", "bc"], stop_token_ids=[np.int64(3)]).stop_token_ids == (3,)


@pytest.mark.parametrize(("field", "value"), [
    ("n", 2.5), ("max_new_tokens", 3.7), ("top_k", 2.5), ("seed", 1.2), ("n", True), ("temperature", "0.5"),
    ("top_p", None), ("ignore_eos", "no"), ("stop_strings", [None]), ("stop_token_ids", [1.7]),
])
def test_sampling_params_of_the_wrong_type_are_refused_naming_the_field(field, value):
    # before: max_new_tokens=3.7 gave 3 tokens natively and a slicing TypeError in the hf engine,
    # seed=1.2 sampled as seed 1, ignore_eos="no" ignored eos, stop id 1.7 became 1
    with pytest.raises(ValueError, match=rf"invalid SamplingParams: {field} must be"):
        SamplingParams(**{field: value})


def test_sampling_params_store_plain_numbers():
    sp = SamplingParams(n=np.int64(2), temperature=0, top_p=np.float32(0.5), seed=torch.tensor(7))
    assert (type(sp.n), type(sp.temperature), type(sp.top_p), type(sp.seed)) == (int, float, float, int)
    assert sp == SamplingParams(n=2, temperature=0.0, top_p=0.5, seed=7) and sp.greedy


@pytest.mark.parametrize(("field", "value", "message"), [
    ("max_batch_size", 0, "max_batch_size must be >= 1"),
    ("max_model_len", 0, "max_model_len must be >= 2 or None"),
    ("max_model_len", -5, "max_model_len must be >= 2 or None"),
    ("threads", 0, "threads must be >= 1 or None"),
    ("max_prefill_tokens", 0, "max_prefill_tokens must be >= 1"),
    ("seed", -1, "seed must be >= 0"),
    ("max_batch_size", 8.5, "max_batch_size must be an integer"),
    ("dtype", "bfloat17", "dtype must be a torch dtype"),
    ("compile", "yes", "compile must be True or False"),
])
def test_engine_options_out_of_range_are_refused_naming_the_field(field, value, message):
    # before: max_model_len=0 failed every prompt as too long, -5 failed in torch.arange deep in
    # the native engine, max_batch_size=0 was taken as 1
    with pytest.raises(ValueError, match=rf"invalid EngineOptions: {message}"):
        EngineOptions(**{field: value})


def test_engine_options_take_a_dtype_by_name():
    assert EngineOptions(dtype="bfloat16").dtype is torch.bfloat16
    assert EngineOptions(dtype=torch.float16).dtype is torch.float16


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                            num_attention_heads=4, num_key_value_heads=2,
                                            max_position_embeddings=64)).eval()


@pytest.mark.parametrize("backend", ["native", "hf"])
def test_a_text_prompt_is_refused_naming_the_request_and_what_to_do(backend):
    # before: "invalid literal for int() with base 10: 'W'" from inside the engine
    engine = build_engine(backend, _tiny_llama())
    with pytest.raises(ValueError, match=r"request 1: .*must be token ids, not text \('What is 2\+2\?'\): "
                                         r"tokenize the prompt first"):
        engine.generate([[1, 2], "What is 2+2?"], SamplingParams(max_new_tokens=2))


@pytest.mark.parametrize("prompt", [[1.5, 2], np.array([3.0, 4.0]), torch.tensor([[1.0, 2.0]]), [True, 3], 7])
def test_prompt_ids_that_are_not_integers_are_refused_not_truncated(prompt):
    # before: [1.5, 2] was generated from as [1, 2], a float tensor likewise
    with pytest.raises(ValueError, match=r"request 0: GenerationRequest prompt_ids must be a sequence of integer "
                                         r"token ids \(got "):
        as_requests([prompt])
    with pytest.raises(ValueError, match=r"^GenerationRequest prompt_ids must be"):
        GenerationRequest(prompt)


def test_integer_prompts_of_any_container_become_plain_lists():
    reqs = as_requests([(1, 2), np.array([3, 4]), torch.tensor([[5, 6]]), GenerationRequest(np.array([7]), seed=1)])
    assert [r.prompt_ids for r in reqs] == [[1, 2], [3, 4], [5, 6], [7]]
    assert all(type(t) is int for r in reqs for t in r.prompt_ids)


@pytest.mark.parametrize("logit", [float("nan"), float("inf")])
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(0.0, 0, 1.0), (1.0, 0, 1.0), (1.0, 0, 0.9), (1.0, 5, 1.0)])
def test_non_finite_logits_are_refused_not_sampled(logit, temperature, top_k, top_p):
    # before, a NaN row: greedy gave token 0 with log-prob NaN, top-k a token with log-prob NaN, full
    # sampling token 127 of a 97-token vocabulary (padding of the block sampler), top-p index -1
    logits = torch.randn(3, 97)
    logits[1, 40] = logit
    with pytest.raises(NonFiniteLogits, match=r"logits hold NaN or \+inf in rows \[1\]"):
        sample_tokens(logits, torch.full((3,), 0.5, dtype=torch.float64), temperature=temperature, top_k=top_k,
                      top_p=top_p)


def test_minus_inf_logits_are_a_masked_token_not_an_error():
    logits = torch.tensor([[0.0, float("-inf"), 0.0, float("-inf")]])
    tokens, lps = sample_tokens(logits, torch.tensor([0.75], dtype=torch.float64), temperature=1.0)
    assert tokens.tolist() == [2] and lps.tolist() == pytest.approx([-0.6931472])   # log 1/2


@pytest.mark.parametrize("backend", ["native", "hf"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_an_engine_with_nan_weights_says_so_instead_of_returning_nan_log_probs(backend, temperature):
    model = _tiny_llama()
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    engine = build_engine(backend, model)
    with pytest.raises(NonFiniteLogits, match=rf"^{backend} engine \(policy version 0\).*the weights hold NaN/inf"):
        engine.generate([GenerationRequest([1, 2, 3], seed=0)],
                        SamplingParams(temperature=temperature, max_new_tokens=3, ignore_eos=True))

"""Native engine vs the references: HF greedy outputs, and the trainer's recomputed log-probs.

The log-prob gap printed here is the per-step training metric (engine vs trainer, same weights).
"""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.rollout import SamplingParams, build_engine, logprob_gap


def make_prompts(k, lo=3, hi=24, seed=0, vocab=4000):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi, (k,), generator=g).tolist()
    return [torch.randint(10, vocab, (n,), generator=g).tolist() for n in lengths]


@pytest.fixture(scope="module")
def built(tmp_path_factory, tokenizer_for_tests):
    """`rlxf init-model` models, loaded back as the trainer loads them."""
    from rlxf.models import init_model, load_model

    cache = {}

    def get(preset):
        if preset not in cache:
            path = init_model(preset, tmp_path_factory.mktemp(preset) / "model", seed=0, tokenizer=tokenizer_for_tests)
            cache[preset] = load_model(path, device="cpu", dtype="float32").eval()
        return cache[preset]

    return get


def assert_same_greedy(model, tokenizer, prompts, max_new_tokens, kernels=None):
    sp = SamplingParams(n=2, temperature=0.0, max_new_tokens=max_new_tokens, ignore_eos=True)
    engine = build_engine("native", model, tokenizer)
    if kernels is not None:
        engine.kernels = kernels
    native = engine.generate(prompts, sp)
    hf = build_engine("hf", model, tokenizer).generate(prompts, sp)
    for a, b in zip(native, hf, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.response_ids == y.response_ids
            assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-4


def test_greedy_native_equals_hf_token_for_token_tiny(built, tokenizer_for_tests):
    assert_same_greedy(built("tiny"), tokenizer_for_tests, make_prompts(6), max_new_tokens=32)


def test_greedy_parity_with_plain_torch_kernels(built, tokenizer_for_tests):
    # the matmul path CUDA and non-oneDNN builds take
    from rlxf.rollout.native.kernels import TorchKernels

    assert_same_greedy(built("tiny"), tokenizer_for_tests, make_prompts(3, seed=5), max_new_tokens=16,
                       kernels=TorchKernels())


def test_bfloat16_engine_runs_and_stays_close_to_its_float32_self(built, tokenizer_for_tests):
    model = built("tiny")
    prompts = make_prompts(3, seed=6)
    sp = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=0, ignore_eos=True)
    bf16 = build_engine("native", model, tokenizer_for_tests, dtype=torch.bfloat16).generate(prompts, sp)
    assert all(len(c.response_ids) == 12 and all(map(math.isfinite, c.logprobs)) for g in bf16 for c in g)
    # log-probs of the bf16 engine's own tokens, recomputed in fp32: a bf16-sized gap, not garbage
    from rlxf.models.logprobs import sequence_logprobs

    flat = [(p, c) for p, g in zip(prompts, bf16, strict=True) for c in g]
    with torch.no_grad():
        out = sequence_logprobs(model, [p for p, _ in flat], [c.response_ids for _, c in flat])
    lp = torch.tensor([c.logprobs for _, c in flat])
    assert logprob_gap(lp, out.logprobs, out.mask)["mean_abs"].item() < 0.05


@pytest.mark.slow
def test_greedy_native_equals_hf_token_for_token_small(built, tokenizer_for_tests):
    assert_same_greedy(built("small"), tokenizer_for_tests, make_prompts(4, seed=1), max_new_tokens=24)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_match_the_trainers_recompute(built, tokenizer_for_tests, temperature):
    from rlxf.models.logprobs import sequence_logprobs

    model = built("tiny")
    prompts = make_prompts(5, seed=2)
    engine = build_engine("native", model, tokenizer_for_tests)
    groups = engine.generate(prompts, SamplingParams(n=4, temperature=temperature, max_new_tokens=24, seed=0))
    flat_p = [p for p, g in zip(prompts, groups, strict=True) for _ in g]
    flat = [c for g in groups for c in g]
    with torch.no_grad():
        out = sequence_logprobs(model, flat_p, [c.response_ids for c in flat], temperature=temperature)
    width = out.logprobs.shape[1]
    engine_lp = torch.tensor([c.logprobs + [0.0] * (width - len(c.logprobs)) for c in flat])
    gap = logprob_gap(engine_lp, out.logprobs, out.mask)
    print(f"\nengine vs trainer log-probs (T={temperature}, fp32 CPU, {int(out.mask.sum())} tokens): "
          f"max |diff| {gap['max_abs'].item():.2e}, mean |diff| {gap['mean_abs'].item():.2e}")
    assert gap["max_abs"].item() < 1e-4


def test_llama_family_greedy_matches_hf_with_biases_and_llama3_rope():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=256, attention_bias=True, mlp_bias=True,
        tie_word_embeddings=False, head_dim=32,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():  # larger weights: sharper, less tie-prone logits
            for p in model.parameters():
                p.mul_(3.0)
    assert_same_greedy(model, None, make_prompts(4, vocab=500, seed=3), max_new_tokens=20)


def test_hf_engine_logprobs_and_stops(built, tokenizer_for_tests):
    from rlxf.models.logprobs import sequence_logprobs

    model = built("tiny")
    engine = build_engine("hf", model, tokenizer_for_tests)
    prompts = make_prompts(3, seed=4)
    free = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_new_tokens=16, ignore_eos=True))[0][0]
    stop = free.response_ids[3]
    stopped = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_new_tokens=16, ignore_eos=True,
                                                          stop_token_ids=[stop]))[0][0]
    assert stopped.finish_reason == "stop"
    assert stopped.response_ids == free.response_ids[: free.response_ids.index(stop) + 1]
    groups = engine.generate(prompts + [[]], SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=1))
    assert groups[-1][0].finish_reason == "error" and "empty prompt" in groups[-1][0].error
    flat = [(p, c) for p, g in zip(prompts, groups, strict=False) for c in g]
    with torch.no_grad():
        out = sequence_logprobs(model, [p for p, _ in flat], [c.response_ids for _, c in flat])
    width = out.logprobs.shape[1]
    lp = torch.tensor([c.logprobs + [0.0] * (width - len(c.logprobs)) for _, c in flat])
    assert logprob_gap(lp, out.logprobs, out.mask)["max_abs"].item() < 1e-4
    again = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=1))
    assert [[c.response_ids for c in g] for g in again] == [[c.response_ids for c in g] for g in groups[:-1]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_engine_matches_hf_and_the_trainer(built, tokenizer_for_tests):
    import copy

    from rlxf.models.logprobs import sequence_logprobs

    model = copy.deepcopy(built("tiny")).to("cuda")
    assert_same_greedy(model, tokenizer_for_tests, make_prompts(4, seed=7), max_new_tokens=24)
    prompts = make_prompts(4, seed=8)
    groups = build_engine("native", model, tokenizer_for_tests).generate(
        prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=24, seed=0))
    flat = [(p, c) for p, g in zip(prompts, groups, strict=True) for c in g]
    with torch.no_grad():
        out = sequence_logprobs(model, [p for p, _ in flat], [c.response_ids for _, c in flat])
    width = out.logprobs.shape[1]
    lp = torch.tensor([c.logprobs + [0.0] * (width - len(c.logprobs)) for _, c in flat], device="cuda")
    assert logprob_gap(lp, out.logprobs, out.mask)["max_abs"].item() < 1e-3  # fp32; GPU kernels sum in other orders

"""The sampler: hand-derived draws from small distributions, and invariants on random logits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.rollout.sampling import derive_seed, sample_keys, sample_tokens, uniforms

P4 = [0.1, 0.2, 0.3, 0.4]


def logits_of(probs, rows=1):
    return torch.log(torch.tensor(probs, dtype=torch.float32)).expand(rows, -1).contiguous()


def draw(probs, us, **kw):
    u = torch.tensor(us, dtype=torch.float64)
    return sample_tokens(logits_of(probs, len(us)), u, **kw)


def test_inverse_cdf_picks_the_token_whose_interval_holds_u():
    # cdf of [0.1, 0.2, 0.3, 0.4] = [0.1, 0.3, 0.6, 1.0]
    tokens, logp = draw(P4, [0.0, 0.05, 0.1, 0.29, 0.31, 0.59, 0.61, 0.999], temperature=1.0)
    assert tokens.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    expected = [math.log(P4[t]) for t in tokens.tolist()]
    assert torch.allclose(logp, torch.tensor(expected), atol=1e-6)


def test_a_uniform_grid_reproduces_the_probabilities():
    # u_i = (i + 0.5) / 1000 hits each token exactly 1000 * p times
    us = [(i + 0.5) / 1000 for i in range(1000)]
    tokens, _ = draw(P4, us, temperature=1.0)
    assert torch.bincount(tokens, minlength=4).tolist() == [100, 200, 300, 400]


@pytest.mark.parametrize("vocab", [64, 100, 200, 1000])
def test_two_level_sampling_matches_the_distribution_for_any_vocab_size(vocab):
    # Blocks of 64 tokens; 100, 200, 1000 are not multiples of the block. probs = w / sum(w)
    # with weights 0, 1, 2, 3, 4, 0, 1, ...: zero-weight tokens must never come out.
    weights = torch.arange(vocab, dtype=torch.float64) % 5
    probs = weights / weights.sum()
    n = int(weights.sum().item())  # one grid point per unit of weight
    us = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    logits = torch.log(probs.float()).expand(n, -1).contiguous()
    tokens, _ = sample_tokens(logits, us, temperature=1.0)
    counts = torch.bincount(tokens, minlength=vocab)
    # float32 cdf rounding may move a grid point across a boundary by one
    assert (counts - weights.long()).abs().max().item() <= 1


def test_temperature_scales_logits_before_softmax_and_logprob():
    # logits [0, ln 3] at T = 0.5 -> [0, 2 ln 3] -> probs [1/10, 9/10]
    logits = torch.tensor([[0.0, math.log(3.0)]] * 2)
    tokens, logp = sample_tokens(logits, torch.tensor([0.05, 0.2], dtype=torch.float64), temperature=0.5)
    assert tokens.tolist() == [0, 1]
    assert torch.allclose(logp, torch.tensor([math.log(0.1), math.log(0.9)]), atol=1e-6)


def test_greedy_takes_the_argmax_and_reports_its_untempered_logprob():
    tokens, logp = sample_tokens(logits_of(P4, 2), None, temperature=0.0)
    assert tokens.tolist() == [3, 3]
    assert torch.allclose(logp, torch.tensor([math.log(0.4)] * 2), atol=1e-6)


def test_top_k_samples_from_the_renormalised_top_k_but_reports_the_full_logprob():
    # top-2 of [0.1, 0.2, 0.3, 0.4] = tokens 3 (4/7), 2 (3/7)
    tokens, logp = draw(P4, [0.0, 0.57, 0.58, 0.999], temperature=1.0, top_k=2)
    assert tokens.tolist() == [3, 3, 2, 2]
    assert torch.allclose(logp, torch.tensor([math.log(0.4)] * 2 + [math.log(0.3)] * 2), atol=1e-6)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    # sorted [0.4, 0.3, 0.2, 0.1]; mass before each [0, 0.4, 0.7, 0.9]; p = 0.6 keeps {3, 2}, mass 0.7
    us = [(i + 0.5) / 700 for i in range(700)]
    tokens, logp = draw(P4, us, temperature=1.0, top_p=0.6)
    assert torch.bincount(tokens, minlength=4).tolist() == [0, 0, 300, 400]
    assert torch.allclose(logp[tokens == 2], torch.tensor(math.log(0.3)), atol=1e-6)


def test_top_p_is_applied_after_top_k_on_the_renormalised_distribution():
    # top-3: [0.4, 0.3, 0.2] / 0.9 = [4/9, 3/9, 2/9]; before = [0, 4/9, 7/9]; p = 0.5 keeps {3, 2}
    us = [(i + 0.5) / 70 for i in range(70)]
    tokens, _ = draw(P4, us, temperature=1.0, top_k=3, top_p=0.5)
    assert torch.bincount(tokens, minlength=4).tolist() == [0, 0, 30, 40]


def test_zero_probability_tokens_are_never_drawn_even_at_the_edges():
    logits = torch.tensor([[float("-inf"), 0.0, float("-inf"), 0.0, float("-inf")]] * 3)
    u = torch.tensor([0.0, 0.5, 1.0 - 2.0**-53], dtype=torch.float64)
    tokens, logp = sample_tokens(logits, u, temperature=1.0)
    assert tokens.tolist() == [1, 3, 3]
    assert torch.allclose(logp, torch.tensor([math.log(0.5)] * 3))


def test_logprob_does_not_underflow_for_unlikely_tokens():
    # p(token 0) = e^-100 ~ 3.8e-44, a float32 denormal: u = 0 draws it; its log-prob must be -100, not
    # the log of a float32 probability that has lost its precision
    logits = torch.tensor([[-100.0, 0.0], [-100.0, 0.0]])
    tokens, logp = sample_tokens(logits, torch.tensor([0.0, 0.5], dtype=torch.float64), temperature=1.0)
    assert tokens.tolist() == [0, 1]
    assert logp.tolist() == pytest.approx([-100.0, 0.0], abs=1e-5)  # log of the denormal: off by 0.017


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    vocab=st.integers(2, 300),
    temperature=st.sampled_from([0.0, 0.3, 1.0, 1.7]),
    top_k=st.sampled_from([0, 1, 5]),
    top_p=st.sampled_from([1.0, 0.9, 0.3]),
)
def test_sampled_tokens_are_allowed_and_logprobs_are_exact(seed, vocab, temperature, top_k, top_p):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(8, vocab, generator=g) * 4
    u = torch.rand(8, generator=g, dtype=torch.float64)
    tokens, logp = sample_tokens(logits, u, temperature=temperature, top_k=top_k, top_p=top_p)
    t = temperature if temperature > 0 else 1.0
    expected = torch.log_softmax(logits / t, -1).gather(-1, tokens[:, None]).squeeze(-1)
    assert torch.allclose(logp, expected, atol=1e-5)
    if temperature == 0:
        assert torch.equal(tokens, logits.argmax(-1))
    elif top_k:
        allowed = torch.topk(logits, min(top_k, vocab), -1).indices
        assert (allowed == tokens[:, None]).any(-1).all()


def test_uniforms_are_a_pure_function_of_key_and_step():
    keys = sample_keys(np.array([7, 7, 8], np.uint64), np.array([0, 1, 0]))
    assert len(set(keys.tolist())) == 3  # seed and sample index both matter
    a = uniforms(keys, np.array([0, 5, 9]))
    b = uniforms(keys[[2, 0, 1]], np.array([9, 0, 5]))  # same (key, step) pairs, shuffled
    assert a.tolist() == b[[1, 2, 0]].tolist()
    many = uniforms(np.full(20000, keys[0], np.uint64), np.arange(20000))
    assert many.min() >= 0.0 and many.max() < 1.0
    assert abs(many.mean() - 0.5) < 0.01 and abs(many.var() - 1 / 12) < 0.005
    assert len(np.unique(many)) == 20000


def test_derived_seeds_differ_per_index_and_are_stable():
    seeds = [derive_seed(3, i) for i in range(100)]
    assert len(set(seeds)) == 100 and all(0 <= s < 2**63 for s in seeds)
    assert seeds == [derive_seed(3, i) for i in range(100)]
    assert derive_seed(4, 0) != seeds[0]

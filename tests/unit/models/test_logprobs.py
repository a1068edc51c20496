"""sequence_logprobs: packed == padded == one sequence at a time == a plain forward."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.models import load_model
from rlxf.models.logprobs import pack_rows, response_mask, sequence_logprobs

PROMPTS = [[1, 50, 60, 70], [1, 9], [1, 300, 301, 302, 303, 304, 305], [4]]
RESPONSES = [[11, 12, 13], [14, 15, 16, 17, 18, 19], [2], [20, 21]]


@pytest.fixture(scope="module")
def model(nano_model_dir):
    torch.manual_seed(0)
    m = load_model(nano_model_dir, device="cpu")
    with torch.no_grad():  # a random init is nearly uniform: sharpen it so mistakes show
        for p in m.parameters():
            p.mul_(4.0)
    return m


def reference(model, prompts, responses, temperature=1.0):
    """A plain forward of each sequence alone, log_softmax of the full logits."""
    lps, ents = [], []
    for p, r in zip(prompts, responses, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([p + r]), use_cache=False).logits[0].float() / temperature
        logp_all = torch.log_softmax(logits[len(p) - 1: len(p) - 1 + len(r)], -1)
        lps.append(logp_all.gather(-1, torch.tensor(r)[:, None]).squeeze(-1))
        ents.append(-(logp_all.exp() * logp_all).sum(-1))
    return lps, ents


def rows(x, lengths):
    return [x[i, :n] for i, n in enumerate(lengths)]


def test_packed_padded_and_alone_agree_with_reference(model):
    lengths = [len(r) for r in RESPONSES]
    ref_lp, ref_ent = reference(model, PROMPTS, RESPONSES)
    with torch.no_grad():
        packed = sequence_logprobs(model, PROMPTS, RESPONSES, packed=True, with_entropy=True, chunk_size=4)
        padded = sequence_logprobs(model, PROMPTS, RESPONSES, packed=False, with_entropy=True)
    assert packed.logprobs.shape == (4, 6) and packed.logprobs.dtype == torch.float32
    for out in (packed, padded):
        for got, want in zip(rows(out.logprobs, lengths), ref_lp, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        for got, want in zip(rows(out.entropy, lengths), ref_ent, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert torch.equal(out.mask, response_mask(RESPONSES))
        assert (out.logprobs[out.mask == 0] == 0).all() and (out.entropy[out.mask == 0] == 0).all()
    # The check has teeth: logprobs differ between sequences and are far from uniform.
    assert packed.logprobs[0, 0] != packed.logprobs[3, 0]
    assert (packed.entropy[packed.mask.bool()] < 0.99 * torch.log(torch.tensor(4096.0))).all()


def test_packing_does_not_leak_across_borders(model):
    """Changing sequence 0 must not change sequence 1 when both share a packed row."""
    with torch.no_grad():
        a = sequence_logprobs(model, [[1, 2, 3], [1, 9]], [[5, 6], [7, 8]]).logprobs
        b = sequence_logprobs(model, [[1, 900, 901], [1, 9]], [[905, 906], [7, 8]]).logprobs
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=1e-6)
    assert not torch.allclose(a[0], b[0])


def test_temperature_scales_logits(model):
    ref_lp, _ = reference(model, PROMPTS, RESPONSES, temperature=0.7)
    with torch.no_grad():
        out = sequence_logprobs(model, PROMPTS, RESPONSES, temperature=0.7)
    for got, want in zip(rows(out.logprobs, [len(r) for r in RESPONSES]), ref_lp, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.lists(st.integers(0, 4095), min_size=1, max_size=6),
                  st.lists(st.integers(0, 4095), min_size=0, max_size=5)),
        min_size=1, max_size=5),
    chunk=st.integers(1, 7),
    row=st.one_of(st.none(), st.integers(1, 12)),
)
def test_property_any_packing_and_chunking_matches_padded(model, data, chunk, row):
    prompts, responses = [p for p, _ in data], [r for _, r in data]
    with torch.no_grad():
        want = sequence_logprobs(model, prompts, responses, packed=False, with_entropy=True)
        got = sequence_logprobs(model, prompts, responses, packed=True, chunk_size=chunk,
                                max_tokens_per_row=row, with_entropy=True)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-5, atol=1e-5)
    # H = log Z - sum_v p_v z_v subtracts two terms of the logits' size (tens here: the weights
    # are scaled x4), so it inherits their rounding, which differs between a one-row head matmul
    # (chunk 1: oneDNN's matrix-vector path) and a many-row one: up to 8.7e-5 seen in 600 cases
    torch.testing.assert_close(got.entropy, want.entropy, rtol=1e-4, atol=3e-4)


def _grads(model, **kw):
    model.zero_grad()
    out = sequence_logprobs(model, PROMPTS, RESPONSES, with_entropy=True, **kw)
    (out.logprobs.sum() + 0.1 * out.entropy.sum()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_gradients_agree_packed_padded_and_checkpointed(model):
    want = _grads(model, packed=False, chunk_size=1024, checkpoint_chunks=False)
    for kw in ({"packed": True, "chunk_size": 3, "checkpoint_chunks": True},
               {"packed": True, "chunk_size": 5, "checkpoint_chunks": False, "max_tokens_per_row": 10}):
        got = _grads(model, **kw)
        for name in want:  # fp32 sums over 4096 vocab entries: compare relative to each tensor's scale
            scale = want[name].abs().max().item()
            torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5 * scale, msg=name)
    assert any(g.abs().sum() > 0 for g in want.values())
    model.zero_grad()


def _vocab_bytes_saved_for_backward(model, **kw) -> int:
    """Bytes of (·, vocab)-shaped tensors autograd keeps for the backward pass (parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and t.dim() >= 1 and t.shape[-1] == 4096:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = sequence_logprobs(model, [[1] * 8] * 4, [[3] * 64] * 4, chunk_size=32, with_entropy=True, **kw)
    (out.logprobs.sum() + out.entropy.sum()).backward()
    model.zero_grad()
    return sum(seen.values())


def test_checkpointed_chunks_keep_no_logits_for_backward(model):
    """256 response tokens x 4096 vocab: plain autograd keeps the fp32 logits (and softmax) of all
    chunks until backward; checkpointed chunks keep none of them."""
    assert _vocab_bytes_saved_for_backward(model, checkpoint_chunks=False) >= 256 * 4096 * 4
    assert _vocab_bytes_saved_for_backward(model, checkpoint_chunks=True) == 0


def test_zero_length_responses(model):
    with torch.no_grad():
        out = sequence_logprobs(model, [[1, 2], [3]], [[], [5, 6]], with_entropy=True)
        none = sequence_logprobs(model, [[1, 2]], [[]], with_entropy=True)
    assert out.logprobs.shape == (2, 2) and (out.logprobs[0] == 0).all() and (out.logprobs[1] != 0).all()
    assert none.logprobs.shape == (1, 0) and none.entropy.shape == (1, 0)


def test_bad_inputs_are_named(model):
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        sequence_logprobs(model, [[1], [2]], [[3]])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        sequence_logprobs(model, [[1], []], [[3], [4]])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sequence_logprobs(model, [[1]], [[3]], temperature=0.0)


def test_pack_rows_first_fit_decreasing():
    assert pack_rows([3, 4, 2, 9, 1], 7) == [[3], [1, 0], [2, 4]]
    assert pack_rows([3, 4], None) == [[0, 1]]
    assert pack_rows([], None) == []


@given(st.lists(st.integers(1, 20), max_size=12), st.integers(1, 25))
def test_property_pack_rows_is_a_partition_within_limit(lengths, limit):
    rows = pack_rows(lengths, limit)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    for row in rows:
        assert len(row) == 1 or sum(lengths[i] for i in row) <= limit


def test_auto_rows_follow_the_attention_kernel(model):
    from rlxf.models.logprobs import auto_row_tokens

    assert auto_row_tokens(model, [10, 300]) == 300 and auto_row_tokens(model, [10, 20]) == 256
    impl = model.config._attn_implementation
    try:
        model.config._attn_implementation = "flash_attention_2"
        assert auto_row_tokens(model, [10, 300]) is None
    finally:
        model.config._attn_implementation = impl


def test_llama_architecture_and_lora(nano_model_dir):
    """Not Qwen2-specific: a Llama model built in-process, and a PEFT-wrapped model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlxf.config.model import LoraConfig

    torch.manual_seed(1)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         attn_implementation="sdpa"))
    prompts, responses = [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]]
    lora = load_model(nano_model_dir, lora=LoraConfig(r=2))
    for m in (llama, lora):
        ref_lp, _ = reference(m, prompts, responses)
        with torch.no_grad():
            got = sequence_logprobs(m, prompts, responses, chunk_size=2).logprobs
        for g, w in zip(rows(got, [2, 3]), ref_lp, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_gradient_checkpointing_and_bf16(nano_model_dir):
    """Activation checkpointing changes no number; bf16 weights still give float32 log-probs."""
    plain = load_model(nano_model_dir)
    ckpt = load_model(nano_model_dir, gradient_checkpointing=True)
    ckpt.train()
    want = _grads(plain, packed=False)
    got = _grads(ckpt, packed=True, chunk_size=3)
    for name in want:
        scale = want[name].abs().max().item()
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5 * scale, msg=name)
    bf16 = load_model(nano_model_dir, dtype="bfloat16")
    with torch.no_grad():
        lp16 = sequence_logprobs(bf16, PROMPTS, RESPONSES).logprobs
        lp32 = sequence_logprobs(plain, PROMPTS, RESPONSES).logprobs
    assert lp16.dtype == torch.float32
    torch.testing.assert_close(lp16, lp32, rtol=0, atol=0.05)

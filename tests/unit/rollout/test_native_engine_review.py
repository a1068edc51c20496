"""The native engine under concurrent use, its oneDNN row-count padding, and unsupported models."""

from __future__ import annotations

import threading

import pytest
import torch

from rlxf.rollout import GenerationRequest, SamplingParams
from rlxf.rollout.base import DecodeHooks, EngineOptions
from rlxf.rollout.native.engine import NativeEngine
from rlxf.rollout.native.kernels import OneDNNKernels, select_kernels


def _llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


SP = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, ignore_eos=True)
REQS_A = [GenerationRequest([1, 2, 3], seed=1), GenerationRequest(list(range(5, 40)), seed=2)]
REQS_B = [GenerationRequest([7] * 20, seed=3), GenerationRequest([9, 8], seed=4), GenerationRequest([4], seed=5)]


def _key(groups):
    return [[(c.response_ids, c.logprobs, c.token_versions) for c in g] for g in groups]


def _during_first_step(engine, reqs, other):
    """``engine.generate(reqs)`` with ``other`` started in a thread before its first decode step
    (given half a second to run alongside it, as an unguarded engine would let it)."""
    started: list[threading.Thread] = []

    def between_steps():
        if not started:
            started.append(threading.Thread(target=other))
            started[0].start()
            started[0].join(0.5)

    out = engine.generate(reqs, SP, DecodeHooks(between_steps=between_steps))
    started[0].join()
    return out


def test_a_generate_call_from_another_thread_waits_and_neither_changes():
    engine = NativeEngine(_llama(0), options=EngineOptions(threads=1))
    solo_a, solo_b = engine.generate(REQS_A, SP), engine.generate(REQS_B, SP)
    got_b, errors = [], []

    def call_b():
        try:
            got_b.append(engine.generate(REQS_B, SP))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    got_a = _during_first_step(engine, REQS_A, call_b)
    assert errors == []
    assert _key(got_a) == _key(solo_a) and _key(got_b[0]) == _key(solo_b)


def test_update_weights_from_another_thread_waits_for_the_running_call():
    old, new = _llama(0), _llama(1)
    engine = NativeEngine(old, options=EngineOptions(threads=1))
    solo = engine.generate(REQS_A, SP)
    got = _during_first_step(engine, REQS_A, lambda: engine.update_weights(new.named_parameters(), 1))
    assert _key(got) == _key(solo)   # every token from the old weights, tagged version 0
    assert engine.policy_version == 1
    after = engine.generate(REQS_A, SP)
    assert {v for g in after for c in g for v in c.token_versions} == {1}
    assert _key(after)[0][0][:2] == _key(NativeEngine(new).generate(REQS_A, SP))[0][0][:2]


def test_update_weights_from_a_decode_worker_thread_is_refused():
    engine = NativeEngine(_llama(0), options=EngineOptions(threads=2))
    new = _llama(1)

    def on_group(i, group):
        engine.update_weights(new.named_parameters(), 1)

    with pytest.raises(RuntimeError, match="decode worker thread.*EngineOptions.threads=1"):
        engine.generate(REQS_B, SP, DecodeHooks(on_group=on_group))
    assert engine.policy_version == 0


def test_the_native_engine_names_the_hf_backend_for_a_model_it_cannot_run():
    from transformers import GPT2Config, GPT2LMHeadModel

    from rlxf.rollout.native.model import UnsupportedModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, bos_token_id=0, eos_token_id=0))
    with pytest.raises(UnsupportedModel, match=r"model_type 'gpt2'.*rollout\.backend: hf"):
        NativeEngine(gpt2)


@pytest.mark.skipif(select_kernels(torch.device("cpu"), torch.float32).name != "onednn",
                    reason="oneDNN linear not available in this torch build")
def test_onednn_sees_few_row_counts_and_padding_keeps_every_bit():
    """oneDNN caches a primitive per row count: 84 row counts must not become 84 of them."""
    k = OneDNNKernels()
    seen: set[int] = set()
    op = k._op

    class Recording:
        def __call__(self, x, *args):
            seen.add(x.shape[0])
            return op(x, *args)

        def binary(self, x, *args):
            seen.add(x.shape[0])
            return op.binary(x, *args)

    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
    wgu = torch.randn(48, 16, generator=g)
    for m in (1, 17, 33, 100):
        x, res = torch.randn(m, 16, generator=g), torch.randn(m, 24, generator=g)
        pw = k._packed(w)
        direct = [op(x.expand(2, 16) if m == 1 else x, pw, b, "none", [], "")[:m],
                  op.binary(x.expand(2, 16) if m == 1 else x, res.expand(2, 24) if m == 1 else res, pw, b, "add")[:m]]
        k._op = Recording()
        padded = [k.linear(x, w, b), k.linear_add(x, w, b, res)]
        k.gated(x, wgu, None)
        k._op = op
        assert all(torch.equal(d, p) for d, p in zip(direct, padded))
    # 1 -> 2; up to 16 as is; then 3 significant bits: 17 -> 18, 33 -> 36, 100 -> 104
    assert seen == {2, 18, 36, 104}
    k._op = Recording()
    seen.clear()
    for m in range(17, 101):
        k.linear(torch.randn(m, 16, generator=g), w)
    # 17..31 step 2, 32..63 step 4, 64..104 step 8
    assert seen == set(range(18, 33, 2)) | set(range(36, 65, 4)) | set(range(72, 105, 8))


@pytest.mark.parametrize("threads", [1, 2])
def test_generate_from_a_hook_of_a_running_call_is_refused(threads):
    engine = NativeEngine(_llama(0), options=EngineOptions(threads=threads))
    solo = engine.generate(REQS_B, SP)
    inner = []

    def on_group(i, group):
        inner.append(engine.generate(REQS_A, SP))

    with pytest.raises(RuntimeError, match="from a hook of a running generate call"):
        engine.generate(REQS_B, SP, DecodeHooks(on_group=on_group))
    assert inner == []
    assert _key(engine.generate(REQS_B, SP)) == _key(solo)   # the engine is usable afterwards


@pytest.mark.parametrize("bad", ["shape", "name"])
def test_a_refused_weight_update_leaves_every_weight_as_it_was(bad):
    engine = NativeEngine(_llama(0))
    before = engine.generate(REQS_A, SP)
    new = list(_llama(1).named_parameters())
    if bad == "shape":   # the last tensor is wrong: the ones before it must not be copied either
        new[-1] = (new[-1][0], torch.zeros(3))
    else:
        new.append(("model.layers.0.self_attn.q_proj.lora_A.weight", torch.zeros(2, 32)))
    with pytest.raises(ValueError if bad == "shape" else KeyError, match="update_weights"):
        engine.update_weights(new, 1)
    assert engine.policy_version == 0
    assert _key(engine.generate(REQS_A, SP)) == _key(before)

"""Pieces of the native engine: matmul kernels, rotary layout, weight mapping, KV cache moves."""

from __future__ import annotations

import pytest
import torch

from rlxf.rollout.native.kernels import OneDNNKernels, TorchKernels, select_kernels
from rlxf.rollout.native.model import NativeWeights, model_spec, rotate_


def _onednn_kernels_here() -> bool:
    try:
        return select_kernels(torch.device("cpu"), torch.float32, prefer="onednn").name == "onednn"
    except RuntimeError:
        return False


def test_kernel_selection_on_cpu():
    k = select_kernels(torch.device("cpu"), torch.float32)
    assert k.name in ("onednn", "torch")
    assert select_kernels(torch.device("cpu"), torch.float32, prefer="torch").name == "torch"
    with pytest.raises(ValueError, match="valid: auto, onednn, torch"):
        select_kernels(torch.device("cpu"), torch.float32, prefer="fast")


@pytest.mark.skipif(not _onednn_kernels_here(),
                    reason="oneDNN linear not available in this torch build")
def test_onednn_kernels_agree_with_plain_torch():
    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(37, 64, generator=g), torch.randn(37, 48, generator=g)
    w, b = torch.randn(48, 64, generator=g), torch.randn(48, generator=g)
    wgu, bgu = torch.randn(96, 64, generator=g), torch.randn(96, generator=g)
    a, t = OneDNNKernels(), TorchKernels()
    torch.testing.assert_close(a.linear(x, w, b), t.linear(x, w, b), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(a.linear_add(x, w, b, res), t.linear_add(x, w, b, res), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(a.gated(x, wgu, bgu), t.gated(x, wgu, bgu), atol=1e-4, rtol=1e-5)
    # the reference itself, written out: silu(gate) * up
    gate, up = x @ wgu[:48].T + bgu[:48], x @ wgu[48:].T + bgu[48:]
    torch.testing.assert_close(t.gated(x, wgu, bgu), gate * torch.sigmoid(gate) * up, atol=1e-4, rtol=1e-5)


@pytest.mark.skipif(not _onednn_kernels_here(),
                    reason="oneDNN linear not available in this torch build")
def test_packed_weights_give_the_unpacked_bits_and_follow_in_place_updates():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 64, generator=g), torch.randn(96, 64, generator=g)
    k = OneDNNKernels()
    unpacked = k._op(x, w, None, "none", [], "")
    assert torch.equal(k.linear(x, w), unpacked)                    # packed once, same bits
    assert torch.equal(k.linear(x[:2].contiguous(), w), unpacked[:2])
    assert len(k._packs) == 1
    with torch.no_grad():
        w[:48].copy_(torch.randn(48, 64, generator=g))              # what update_weights does: an in-place copy
    torch.testing.assert_close(k.linear(x, w), x @ w.T, atol=1e-4, rtol=1e-5)
    assert len(k._packs) == 1                                       # re-packed in place of the stale one
    # the selection's probe runs on random weights that are freed after it: none of their packed
    # copies is left for a later tensor at the same address to find
    assert select_kernels(torch.device("cpu"), torch.float32, prefer="onednn")._packs == {}


def test_interleaved_rotation_equals_transformers_half_split_rotation():
    from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

    d, heads, n = 8, 3, 5
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, heads, d, generator=g)
    freqs = torch.randn(n, d // 2, generator=g)
    cos, sin = freqs.cos(), freqs.sin()
    # transformers: half-split layout, tables repeated over both halves
    emb_cos, emb_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    ref, _ = apply_rotary_pos_emb(x, x, emb_cos, emb_sin, unsqueeze_dim=1)
    # ours: interleave (x_i, x_{i+d/2}) pairs, rotate, de-interleave
    inter = x.view(n, heads, 2, d // 2).transpose(-1, -2).reshape(n, heads, d).contiguous()
    rotate_(inter, cos[:, None], sin[:, None])
    back = inter.view(n, heads, d // 2, 2).transpose(-1, -2).reshape(n, heads, d)
    torch.testing.assert_close(back, ref, atol=1e-6, rtol=1e-6)
    # the real-arithmetic path (non-float32 dtypes) gives the same rotation
    inter64 = x.double().view(n, heads, 2, d // 2).transpose(-1, -2).reshape(n, heads, d).contiguous()
    rotate_(inter64, cos[:, None].double(), sin[:, None].double())
    torch.testing.assert_close(inter64.view(n, heads, d // 2, 2).transpose(-1, -2).reshape(n, heads, d).float(), ref,
                               atol=1e-6, rtol=1e-6)


def _tiny_qwen(seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(cfg).eval()


def test_every_parameter_has_a_target_and_the_qkv_projection_is_preserved():
    model = _tiny_qwen()
    spec = model_spec(model)
    w = NativeWeights.allocate(spec, "cpu", torch.float32)
    assert w.load_(model.named_parameters(), require_all=True) == len(dict(model.named_parameters()))
    x = torch.randn(3, 32)
    attn = model.model.layers[1].self_attn
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    fused = (x @ w.layers[1].wqkv.T + w.layers[1].bqkv).view(3, 4 + 2 + 2, 8)
    # q and k heads come out interleaved: element 2i is HF's i, 2i+1 is HF's i + D/2
    def deinterleave(t):
        return t.view(3, -1, 4, 2).transpose(-1, -2).reshape(3, -1)

    torch.testing.assert_close(deinterleave(fused[:, :4]), q)
    torch.testing.assert_close(deinterleave(fused[:, 4:6]), k)
    torch.testing.assert_close(fused[:, 6:].reshape(3, -1), v)
    gate_up = x @ w.layers[1].wgu.T
    torch.testing.assert_close(gate_up[:, :48], model.model.layers[1].mlp.gate_proj(x))


def test_load_rejects_wrong_shapes_and_unknown_names_and_reports_missing():
    model = _tiny_qwen()
    w = NativeWeights.allocate(model_spec(model), "cpu", torch.float32)
    with pytest.raises(ValueError, match="has shape"):
        w.load_([("model.norm.weight", torch.zeros(31))])
    with pytest.raises(KeyError, match="merged_state_dict"):
        w.load_([("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", torch.zeros(2, 32))])
    with pytest.raises(KeyError, match="lack"):
        w.load_([("model.norm.weight", torch.zeros(32))], require_all=True)
    # wrapper prefixes are stripped: DDP / torch.compile / PEFT names reach the same tensor
    w.load_([("module._orig_mod.model.norm.weight", torch.full((32,), 3.0))])
    assert torch.equal(w.norm, torch.full((32,), 3.0))


def test_unsupported_models_say_why():
    from transformers import GPT2Config, GPT2LMHeadModel

    from rlxf.rollout.native.model import UnsupportedModel

    with pytest.raises(UnsupportedModel, match="model_type 'gpt2'"):
        model_spec(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16)))
    qwen = _tiny_qwen()
    # the layer types transformers builds the model from: layer 1 slides with a 16-token window
    qwen.config.sliding_window, qwen.config.layer_types = 16, ["full_attention", "sliding_attention"]
    with pytest.raises(UnsupportedModel, match=r"layers \[1\] use sliding-window"):
        model_spec(qwen)

"""The context an engine holds: a sliding window longer than ``max_model_len`` is full attention
on every sequence the engine can hold, and a model without ``max_position_embeddings`` runs."""

from __future__ import annotations

import pytest
import torch

from rlxf.rollout.base import EngineOptions, SamplingParams
from rlxf.rollout.native.model import UnsupportedModel
from rlxf.rollout.registry import build_engine

transformers = pytest.importorskip("transformers")


def _qwen_window(window: int):
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, use_sliding_window=True, sliding_window=window,
        max_window_layers=0)).eval()


def test_a_window_longer_than_max_model_len_runs_natively_as_full_attention():
    model = _qwen_window(32)   # slides within max_position_embeddings 64, never within 16 tokens
    engine = build_engine("native", model, max_model_len=16, threads=1)
    assert engine.name == "native"
    prompt = [3, 4, 5, 6]
    [[c]] = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=20, ignore_eos=True))
    assert len(c.response_ids) == 12 and c.finish_reason == "length"   # 16 - 4 prompt tokens
    with torch.no_grad():   # transformers' own sliding-window forward over the whole sequence
        seq = torch.tensor([prompt + c.response_ids])
        logp = torch.log_softmax(model(seq).logits[0, len(prompt) - 1:-1].float(), -1)
    assert c.response_ids == logp.argmax(-1).tolist()
    torch.testing.assert_close(torch.tensor(c.logprobs), logp.max(-1).values, atol=1e-4, rtol=0)


def test_a_window_within_max_model_len_is_still_refused_and_names_the_limit():
    from rlxf.rollout.native.engine import NativeEngine

    with pytest.raises(UnsupportedModel, match=r"sliding_window 32 < max_model_len 48"):
        NativeEngine(_qwen_window(32), options=EngineOptions(max_model_len=48))
    assert build_engine("native", _qwen_window(32), max_model_len=48).name == "hf"


@pytest.mark.parametrize("name", ["bloom", "mpt"])
def test_the_hf_engine_runs_a_model_without_max_position_embeddings(name):
    t = transformers
    torch.manual_seed(0)
    model = {
        "bloom": lambda: t.BloomForCausalLM(t.BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4)),
        "mpt": lambda: t.MptForCausalLM(t.MptConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=8,
                                                    expansion_ratio=2)),
    }[name]().eval()
    engine = build_engine("hf", model, max_model_len=None if name == "mpt" else 8)
    assert engine.context_window == 8   # MPT's max_seq_len; Bloom (none): max_model_len
    greedy = SamplingParams(temperature=0, max_new_tokens=10, ignore_eos=True)
    [[ok], [bad]] = engine.generate([[1, 2, 3], list(range(1, 9))], greedy)
    assert len(ok.response_ids) == 5 and ok.finish_reason == "length"
    assert bad.finish_reason == "error" and "context window is 8" in bad.error


def test_the_hf_engine_batches_a_prompt_near_the_window_without_running_past_it():
    """GPT-2's learned positions end at n_positions: a 12-token prompt batched with a 2-token one
    would decode 14 tokens (the short one's limit), positions 12..25 of a 16-row table."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=16, bos_token_id=0, eos_token_id=1)).eval()
    engine = build_engine("hf", model)
    greedy = SamplingParams(temperature=0, max_new_tokens=20, ignore_eos=True)
    short, long_ = [2, 3], list(range(2, 14))
    together = engine.generate([short, long_], greedy)
    assert [len(g[0].response_ids) for g in together] == [14, 4]   # each up to the 16-token window
    alone = [engine.generate([p], greedy)[0] for p in (short, long_)]
    assert [g[0].response_ids for g in together] == [g[0].response_ids for g in alone]


def test_the_hf_engine_copy_of_a_lora_model_keeps_the_policy_dtype():
    pytest.importorskip("peft")
    from rlxf.config.model import LoraConfig
    from rlxf.models.loading import apply_lora

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64)).to(torch.bfloat16).eval()
    engine = build_engine("hf", apply_lora(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])))
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert engine.device == next(model.parameters()).device

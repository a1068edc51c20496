"""Padding uses a token id the embedding holds: a config's ``pad_token_id: -1`` (early LLaMA
conversions) would fail every padded forward with an index error."""

from __future__ import annotations

import pytest
import torch

from rlxf.models.logprobs import sequence_logprobs
from rlxf.models.value_model import ValueModel, sequence_values

transformers = pytest.importorskip("transformers")

PROMPTS, RESPONSES = [[1, 2, 3, 4], [5, 6], [5, 6]], [[7, 8], [9, 10, 11], [12]]


@pytest.fixture(scope="module")
def llama_pad_minus_one():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=-1)).eval()


def one_at_a_time(model, prompts, responses) -> torch.Tensor:
    """Each sequence alone through the model's own forward: no padding anywhere."""
    out = torch.zeros(len(prompts), max(len(r) for r in responses))
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        logp = torch.log_softmax(model(torch.tensor([p + r])).logits[0, len(p) - 1:-1].float(), -1)
        out[i, :len(r)] = logp.gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
    return out


@pytest.mark.parametrize("kw", [dict(packed=False, share_prompts=False), dict(share_prompts=True),
                                dict(max_tokens_per_row=6, share_prompts=False)])
def test_log_probs_of_a_model_whose_pad_token_id_is_minus_one(llama_pad_minus_one, kw):
    with torch.no_grad():
        want = one_at_a_time(llama_pad_minus_one, PROMPTS, RESPONSES)
        got = sequence_logprobs(llama_pad_minus_one, PROMPTS, RESPONSES, **kw).logprobs
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_values_of_a_trunk_whose_pad_token_id_is_minus_one(llama_pad_minus_one):
    critic = ValueModel(llama_pad_minus_one.model)
    with torch.no_grad():
        values = sequence_values(critic, PROMPTS, RESPONSES, packed=False)
    assert values.shape == (3, 3) and bool((values == 0).all())   # a new head is worth 0 everywhere


def test_the_hf_engine_pads_a_batch_of_a_model_whose_pad_token_id_is_minus_one(llama_pad_minus_one):
    from rlxf.rollout import SamplingParams, build_engine

    engine = build_engine("hf", llama_pad_minus_one)
    greedy = SamplingParams(temperature=0, max_new_tokens=3, ignore_eos=True)
    together = engine.generate([[1, 2, 3], [4, 5, 6, 7, 8]], greedy)   # the first row is left-padded
    alone = engine.generate([[1, 2, 3]], greedy)
    assert together[0][0].response_ids == alone[0][0].response_ids and len(together[1][0].response_ids) == 3

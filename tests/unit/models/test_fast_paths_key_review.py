"""The probes' answers (packing / prompt sharing give the padded path's numbers) hold for the
attention implementation they ran under: switching it on the same model probes again."""

from __future__ import annotations

import pytest
import torch

from rlxf.models.logprobs import causal_lm_parts, fast_paths, sequence_logprobs

transformers = pytest.importorskip("transformers")

GROUP_P, GROUP_R = [[1, 2, 3, 4, 20, 21]] * 3 + [[5, 6]], [[7, 8, 9], [10, 11, 12, 13], [14], [15, 16]]
DISTINCT_P, DISTINCT_R = [[1, 2, 3, 4], [5, 6], [17, 18, 19]], [[7, 8, 9], [10, 11, 12, 13], [14, 15]]


def _maskless(module, query, key, value, attention_mask, **kwargs):
    """A kernel that brings its own causal mask and takes none from transformers (as paged or
    external kernels do): packed sequences see each other, and a cached prompt is misaligned."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    return sdpa_attention_forward(module, query, key, value, None, is_causal=True, **kwargs)


@pytest.fixture
def maskless_attention():
    from transformers import AttentionInterface

    AttentionInterface.register("rlxf_test_maskless", _maskless)
    try:
        yield "rlxf_test_maskless"
    finally:
        AttentionInterface._global_mapping.pop("rlxf_test_maskless", None)


def test_changing_the_attention_implementation_probes_again(maskless_attention):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
        sequence_logprobs(model, DISTINCT_P, DISTINCT_R)
        sequence_logprobs(model, GROUP_P, GROUP_R)
        trunk = causal_lm_parts(model)[0]
        assert fast_paths(trunk).packed is True and fast_paths(trunk).shared is True   # under sdpa
        model.set_attn_implementation(maskless_attention)
        for prompts, responses in ((DISTINCT_P, DISTINCT_R), (GROUP_P, GROUP_R)):
            want = sequence_logprobs(model, prompts, responses, packed=False, share_prompts=False).logprobs
            got = sequence_logprobs(model, prompts, responses).logprobs
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    state = fast_paths(trunk)
    assert state.packed is False and state.shared is False
    assert state.key[0] == (maskless_attention,)

"""The trainer's log-probs are those of the model's own forward, whatever the architecture does
between its trunk and its logits (scales, soft-caps, a scaled head input)."""

import pytest
import torch

from rlxf.models.logprobs import causal_lm_parts, forward_uses_trunk, sequence_logprobs

transformers = pytest.importorskip("transformers")

PROMPTS = [[1, 2, 3, 4], [5, 6], [5, 6]]
RESPONSES = [[7, 8, 9], [10, 11, 12], [13]]
SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def build(name: str):
    t = transformers
    configs = {
        "cohere": lambda: t.CohereForCausalLM(t.CohereConfig(**SMALL, logit_scale=0.25)),
        "granite": lambda: t.GraniteForCausalLM(t.GraniteConfig(
            **SMALL, logits_scaling=4.0, embedding_multiplier=3.0, attention_multiplier=0.5, residual_multiplier=0.7)),
        "hyperclovax": lambda: t.HyperCLOVAXForCausalLM(t.HyperCLOVAXConfig(**SMALL, logits_scaling=0.3)),
        "minicpm3": lambda: t.MiniCPM3ForCausalLM(t.MiniCPM3Config(
            **{**SMALL, "num_key_value_heads": 4}, dim_model_base=8, scale_emb=2.0, q_lora_rank=16,
            kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)),
        "gemma2": lambda: t.Gemma2ForCausalLM(t.Gemma2Config(**SMALL, head_dim=8, final_logit_softcapping=2.0)),
        "opt": lambda: t.OPTForCausalLM(t.OPTConfig(
            vocab_size=64, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, word_embed_proj_dim=32)),
    }
    if not hasattr(t, type_name := {"hyperclovax": "HyperCLOVAXConfig", "minicpm3": "MiniCPM3Config"}.get(name, "AutoConfig")):
        pytest.skip(f"transformers {t.__version__} has no {type_name}")
    torch.manual_seed(0)
    model = configs[name]().eval()
    with torch.no_grad():  # sharpen the near-uniform init so a missed scale shows
        for p in model.parameters():
            p.mul_(3.0)
    return model


def forward_logprobs(model) -> torch.Tensor:
    """(B, T) log-probs of RESPONSES read off the model's full forward, one sequence at a time."""
    rows = []
    for p, r in zip(PROMPTS, RESPONSES, strict=True):
        logp = model(torch.tensor([p + r])).logits[0].float().log_softmax(-1)
        rows.append(torch.stack([logp[len(p) - 1 + t, a] for t, a in enumerate(r)]))
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)


@pytest.mark.parametrize("name", ["cohere", "granite", "hyperclovax", "minicpm3", "gemma2", "opt"])
def test_logprobs_match_the_models_forward(name):
    model = build(name)
    with torch.no_grad():
        want = forward_logprobs(model)
        got = sequence_logprobs(model, PROMPTS, RESPONSES, packed=False, chunk_size=2).logprobs
    assert want.abs().max() > 0.5  # teeth: the scales above change these by more than atol
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_gradient_goes_through_the_scale():
    """d/dW of the log-probs equals that of the forward's (the scale is inside the graph)."""
    model = build("cohere")
    head = model.get_output_embeddings().weight
    sequence_logprobs(model, PROMPTS, RESPONSES, packed=False, chunk_size=2).logprobs.sum().backward()
    got, head.grad = head.grad.clone(), None
    forward_logprobs(model).sum().backward()
    torch.testing.assert_close(got, head.grad, rtol=1e-4, atol=1e-6)


def test_the_trunk_is_left_as_it_was():
    """The head's run of the model's forward replaces the trunk's forward only for that run,
    and a forward set on the instance (accelerate's hooks) is put back."""
    model = build("cohere")
    trunk, head, lm = causal_lm_parts(model)
    assert forward_uses_trunk(lm, trunk, head)
    assert "forward" not in vars(trunk)
    marker = trunk.forward
    trunk.forward = marker
    with torch.no_grad():
        sequence_logprobs(model, PROMPTS, RESPONSES, packed=False)
    assert vars(trunk)["forward"] is marker
    with torch.no_grad():
        assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 64)


def test_opt_calls_its_decoder_so_the_head_runs_alone():
    trunk, head, lm = causal_lm_parts(build("opt"))
    assert not forward_uses_trunk(lm, trunk, head)

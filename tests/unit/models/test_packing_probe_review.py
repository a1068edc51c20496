"""Packing and prompt sharing are used only on trunks where a probe finds they give the padded
path's numbers: OPT takes positions, Bloom and MPT their ALiBi mask from the attention mask, so
packed sequences see each other there, and MPT counts a short prompt's padding as distance."""

from __future__ import annotations

import logging

import pytest
import torch

from rlxf.models.logprobs import (
    causal_lm_parts,
    fast_paths,
    packing_isolates,
    prompt_sharing_matches,
    sequence_logprobs,
)
from rlxf.models.value_model import ValueModel, sequence_values

transformers = pytest.importorskip("transformers")

# GROUP: one prompt shared by three samples, so share_prompts='auto' shares (2 distinct prompts
# x 6 + 4 x 3 response inputs = 24 trunk tokens against 8 + 9 + 6 + 3 = 26 packed); DISTINCT: no
# prompt repeats, so 'auto' packs
GROUP_P, GROUP_R = [[1, 2, 3, 4, 20, 21]] * 3 + [[5, 6]], [[7, 8, 9], [10, 11, 12, 13], [14], [15, 16]]
DISTINCT_P, DISTINCT_R = [[1, 2, 3, 4], [5, 6], [17, 18, 19]], [[7, 8, 9], [10, 11, 12, 13], [14, 15]]


def build(name: str, **extra):
    t = transformers
    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64)
    configs = {
        "opt": lambda: t.OPTForCausalLM(t.OPTConfig(
            vocab_size=64, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, word_embed_proj_dim=32, **extra)),
        "bloom": lambda: t.BloomForCausalLM(t.BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4, **extra)),
        "mpt": lambda: t.MptForCausalLM(t.MptConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=64,
                                                    expansion_ratio=2, **extra)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**small, **extra)),
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**small, **extra)),
    }
    torch.manual_seed(0)
    model = configs[name]().eval()
    with torch.no_grad():  # sharpen the near-uniform init so a leak shows
        for p in model.parameters():
            p.mul_(3.0)
    return model


def padded(model, prompts, responses) -> torch.Tensor:
    return sequence_logprobs(model, prompts, responses, packed=False, share_prompts=False).logprobs


def forwards(model, **kw) -> int:
    """Trunk forwards one sequence_logprobs call makes (counted at the input embedding)."""
    trunk, _, _ = causal_lm_parts(model)
    calls = []
    hook = trunk.get_input_embeddings().register_forward_pre_hook(lambda mod, args: calls.append(1))
    try:
        with torch.no_grad():
            sequence_logprobs(model, **kw)
    finally:
        hook.remove()
    return len(calls)


@pytest.mark.parametrize("name, shares", [("opt", True), ("bloom", True), ("mpt", False)])
def test_default_path_equals_padded_where_packing_leaks(name, shares):
    model = build(name)
    with torch.no_grad():
        for prompts, responses in ((GROUP_P, GROUP_R), (DISTINCT_P, DISTINCT_R)):
            want = padded(model, prompts, responses)
            got = sequence_logprobs(model, prompts, responses).logprobs
            assert want.abs().max() > 1.0  # teeth: the leaks moved these by 0.1-1.8 nats
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    state = fast_paths(causal_lm_parts(model)[0])
    assert state.packed is False and state.shared is shares


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_correct_trunks_keep_the_fast_paths(name):
    model = build(name)
    with torch.no_grad():
        for prompts, responses in ((GROUP_P, GROUP_R), (DISTINCT_P, DISTINCT_R)):
            torch.testing.assert_close(sequence_logprobs(model, prompts, responses).logprobs,
                                       padded(model, prompts, responses), rtol=0, atol=1e-5)
    trunk, _, _ = causal_lm_parts(model)
    assert fast_paths(trunk).packed is True and fast_paths(trunk).shared is True


def test_each_probe_runs_once_per_trunk():
    model = build("qwen2")
    trunk, _, _ = causal_lm_parts(model)
    group, distinct = dict(prompt_ids=GROUP_P, response_ids=GROUP_R), dict(prompt_ids=DISTINCT_P,
                                                                           response_ids=DISTINCT_R)
    # shared: the probe's padded reference (1) and shared run (2), then prompts + responses (2)
    assert forwards(model, **group) == 3 + 2
    state = fast_paths(trunk)
    assert forwards(model, **group) == 2
    # packed: the probe's one forward, then the one packed row
    assert forwards(model, **distinct) == 1 + 1
    assert forwards(model, **distinct) == 1
    assert fast_paths(trunk) is state and vars(trunk)["_rlxf_fast_paths"] is state
    assert forwards(build("qwen2"), **distinct) == 2  # a new model object probes again


def test_value_model_on_a_leaking_trunk():
    """sequence_values shares the packed path: a Bloom critic reads the padded path's values."""
    t = transformers
    torch.manual_seed(0)
    critic = ValueModel(t.BloomModel(t.BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4)).eval())
    with torch.no_grad():
        for p in critic.parameters():
            p.mul_(3.0)
        torch.nn.init.normal_(critic.value_head.weight)
        want = sequence_values(critic, DISTINCT_P, DISTINCT_R, packed=False)
        got = sequence_values(critic, DISTINCT_P, DISTINCT_R)
    assert want.abs().max() > 0.5
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert fast_paths(critic.trunk).packed is False


def test_probe_ignores_dropout_and_restores_modes():
    """The probe asks about the architecture: dropout is off while it runs (its answer is kept
    for every later call), and every module's mode is put back."""
    model = build("llama", attention_dropout=0.5)
    model.train()
    model.model.layers[0].eval()  # a mixed tree of modes comes back as it was
    modes = {name: m.training for name, m in model.named_modules()}
    trunk, _, _ = causal_lm_parts(model)
    assert packing_isolates(trunk) and prompt_sharing_matches(trunk)
    assert {name: m.training for name, m in model.named_modules()} == modes


def test_gradients_with_checkpointing_equal_padded():
    """The probe runs inside a training forward (checkpointed layers, autograd on) without
    touching its graph: the gradients are the padded path's."""
    model = build("llama")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()

    def grads(**kw):
        model.zero_grad()
        sequence_logprobs(model, DISTINCT_P, DISTINCT_R, **kw).logprobs.sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    got = grads()  # the first call: the probe runs here
    assert fast_paths(causal_lm_parts(model)[0]).packed is True
    want = grads(packed=False, share_prompts=False)
    assert got.keys() == want.keys() and len(want) > 10
    for n in want:
        scale = want[n].abs().max().item()
        torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-5 * scale, msg=n)


def test_lora_wrapped_leaking_trunks():
    """A PEFT-wrapped causal LM, and a critic whose trunk is the PEFT wrapper (as
    ``ValueModel.from_pretrained(..., lora=...)`` builds it); one warning names the model class."""
    peft = pytest.importorskip("peft")
    lora = dict(r=2, target_modules=["query_key_value"])
    model = peft.get_peft_model(build("bloom"), peft.LoraConfig(**lora))
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger("rlxf").addHandler(handler)  # directly: a run's logging setup stops propagation
    try:
        with torch.no_grad():
            want = padded(model, GROUP_P, GROUP_R)
            got = sequence_logprobs(model, GROUP_P, GROUP_R, share_prompts=False).logprobs
            sequence_logprobs(model, GROUP_P, GROUP_R, share_prompts=False)
    finally:
        logging.getLogger("rlxf").removeHandler(handler)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert [r.getMessage().split(":")[0] for r in records] == ["BloomModel"]
    critic = ValueModel(peft.get_peft_model(build("bloom").transformer,
                                            peft.LoraConfig(task_type="FEATURE_EXTRACTION", **lora)))
    with torch.no_grad():
        torch.nn.init.normal_(critic.value_head.weight)
        torch.testing.assert_close(sequence_values(critic, DISTINCT_P, DISTINCT_R),
                                   sequence_values(critic, DISTINCT_P, DISTINCT_R, packed=False), rtol=0, atol=1e-5)
    assert fast_paths(critic.trunk).packed is False

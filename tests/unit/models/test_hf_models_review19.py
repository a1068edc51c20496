"""Bringing other Hugging Face architectures: LoRA targets, tied heads, value-model directories,
models with their own code."""

from __future__ import annotations

import json

import pytest
import torch

from rlxf.config.model import LoraConfig
from rlxf.models.loading import ModelLoadError, apply_lora, load_model, save_model
from rlxf.models.value_model import ValueModel

pytest.importorskip("peft")


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32))


def _llama(tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied))


def test_gpt2_lora_error_lists_its_conv1d_layers_and_they_work():
    # GPT-2's projections are transformers Conv1D, not nn.Linear: the error listed only lm_head
    with pytest.raises(ModelLoadError, match=r"\['q_proj'\] are not modules .* c_attn, c_fc, c_proj, lm_head"):
        apply_lora(_gpt2(), LoraConfig(r=2, target_modules=["q_proj"]))
    wrapped = apply_lora(_gpt2(), LoraConfig(r=2, target_modules=["c_attn"]))
    assert any("c_attn.lora_A" in n for n, _ in wrapped.named_parameters())


def test_lora_targets_follow_peft_name_matching_and_layer_types():
    # a dotted suffix is a valid PEFT target (was refused); a container or a norm is not (PEFT's bare ValueError)
    wrapped = apply_lora(_llama(tied=False), LoraConfig(r=2, target_modules=["self_attn.q_proj"]))
    assert [n for n, _ in wrapped.named_parameters() if "lora_A" in n] == \
        ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"]
    with pytest.raises(ModelLoadError, match=r"'mlp' names LlamaMLP .* linear layers in it: down_proj, gate_proj, up_proj"):
        apply_lora(_llama(tied=False), LoraConfig(r=2, target_modules=["mlp"]))
    with pytest.raises(ModelLoadError, match=r"'norm' names LlamaRMSNorm modules \(model\.norm\)"):
        apply_lora(_llama(tied=False), LoraConfig(r=2, target_modules=["norm"]))
    with pytest.raises(ModelLoadError, match=r"target_modules is empty .*q_proj.*model\.lora\.r: 0"):
        apply_lora(_llama(tied=False), LoraConfig(r=2, target_modules=[]))


@pytest.mark.parametrize("target", ["lm_head", "embed_tokens"])
def test_lora_on_a_tied_head_or_embedding_is_refused(target):
    # the adapter untied them in the policy; engines copy one tensor into both, losing the delta
    with pytest.raises(ModelLoadError, match=rf"\['{target}'\]: .*tie_word_embeddings"):
        apply_lora(_llama(tied=True), LoraConfig(r=2, target_modules=["q_proj", target]))


def test_lora_on_an_untied_head_reaches_the_rollout_engine():
    from rlxf.rollout.hf import HFEngine

    model = apply_lora(_llama(tied=False), LoraConfig(r=2, target_modules=["lm_head", "embed_tokens"]))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n or "lora_embedding_B" in n:
                p.normal_(0, 0.5)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(HFEngine(model).model(input_ids=ids).logits, model(input_ids=ids).logits,
                                   rtol=1e-5, atol=1e-5)


def test_a_value_model_directory_is_not_loaded_as_a_causal_lm(tmp_path):
    # its trunk has no lm_head: transformers started one at random and printed a report only
    critic = ValueModel(_llama(tied=False).model)
    critic.save_pretrained(tmp_path / "critic")
    with pytest.raises(ModelLoadError, match=r"lacks 1 .*lm_head\.weight.*names LlamaModel"):
        load_model(tmp_path / "critic", device="cpu")
    back = ValueModel.from_pretrained(tmp_path / "critic", device="cpu")  # as a value model it is whole
    assert torch.equal(back.trunk.embed_tokens.weight, critic.trunk.embed_tokens.weight)


def test_a_model_missing_layer_weights_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    _llama(tied=False).save_pretrained(tmp_path / "m")
    f = tmp_path / "m" / "model.safetensors"
    state = {k: v for k, v in load_file(str(f)).items() if "q_proj" not in k}
    save_file(state, str(f), metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"lacks 1 .*q_proj.*copy or save the model again"):
        load_model(tmp_path / "m", device="cpu")
    with pytest.raises(ModelLoadError, match=r"value model .* lacks 1 .*q_proj"):
        ValueModel.from_pretrained(tmp_path / "m", device="cpu")


def test_a_model_with_its_own_code_names_the_config_field(tmp_path):
    model_dir = tmp_path / "custom"
    _llama(tied=False).save_pretrained(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "modeling_x.XConfig", "AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    config["model_type"] = "x-custom"
    (model_dir / "config.json").write_text(json.dumps(config))
    (model_dir / "modeling_x.py").write_text("raise RuntimeError('must not run')\n")
    for load in (load_model, ValueModel.from_pretrained):
        with pytest.raises(ModelLoadError, match=r"own .*model\.trust_remote_code: true") as e:
            load(model_dir, device="cpu")
        assert "copy or save" not in str(e.value)


def test_model_revision_is_not_asked_of_another_tokenizer_repository(tmp_path, monkeypatch, tokenizer_for_tests):
    # model.revision v2 of org/model was looked up in org/tok too, which has no v2: refused
    import huggingface_hub.constants
    import huggingface_hub.utils

    from rlxf.config.model import ModelConfig
    from rlxf.models.loading import tokenizer_from_config

    class Unreachable:
        def head(self, url, timeout):
            raise OSError("no network")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.utils, "get_session", Unreachable)
    for repo, revision, commit in (("org/model", "v2", "a" * 40), ("org/tok", "main", "b" * 40)):
        entry = tmp_path / f"models--{repo.replace('/', '--')}"
        (entry / "refs").mkdir(parents=True)
        (entry / "refs" / revision).write_text(commit)
        (entry / "snapshots" / commit).mkdir(parents=True)
        (entry / "snapshots" / commit / "config.json").write_text("{}")
        tokenizer_for_tests.save_pretrained(entry / "snapshots" / commit)
    tok = tokenizer_from_config(ModelConfig(path="org/model", tokenizer="org/tok", revision="v2"))
    assert len(tok) == len(tokenizer_for_tests)
    with pytest.raises(ModelLoadError, match="org/model at revision 'v3' is not in the local cache"):
        tokenizer_from_config(ModelConfig(path="org/model", revision="v3"))


@pytest.mark.parametrize("target", ["lm_head", "embed_tokens"])
def test_an_adapter_on_a_tied_head_loads_as_the_model_it_was_trained_as(tmp_path, target):
    # merged into the one tensor the head and the embedding share, the delta changed both
    import peft
    from transformers import AutoModelForCausalLM

    _llama(tied=True).save_pretrained(tmp_path / "base")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")  # the adapter names it as its base
    torch.manual_seed(1)
    adapted = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["q_proj", target],
                                                        init_lora_weights=False)).eval()
    adapted.save_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        want = adapted(input_ids=ids).logits
        merged = load_model(tmp_path / "adapter", device="cpu").eval()
        torch.testing.assert_close(merged(input_ids=ids).logits, want, rtol=1e-5, atol=1e-5)
        assert merged.config.tie_word_embeddings is False
        save_model(merged, tmp_path / "saved")
        again = load_model(tmp_path / "saved", device="cpu").eval()
        torch.testing.assert_close(again(input_ids=ids).logits, want, rtol=1e-5, atol=1e-5)

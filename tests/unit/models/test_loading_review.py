"""Loading edge cases: a model directory without a tokenizer, and a saved LoRA adapter directory."""

from __future__ import annotations

import json

import pytest
import torch

from rlxf.config.model import ModelConfig
from rlxf.models.loading import ModelLoadError, load_from_config, load_model, load_tokenizer


@pytest.fixture(scope="module")
def nano(tokenizer_for_tests):
    from rlxf.models.factory import build_model

    return build_model("nano", tokenizer_for_tests, seed=0)


def test_a_model_directory_without_tokenizer_files_is_refused(tmp_path, nano):
    # transformers 5 would build an empty tokenizer from config.json's model type: every prompt
    # then encodes to zero tokens and nothing fails until generation
    nano.save_pretrained(tmp_path / "m", max_shard_size="100KB")  # sharded safetensors, no tokenizer
    assert len(list((tmp_path / "m").glob("model-*.safetensors"))) > 1
    assert torch.equal(load_model(tmp_path / "m", device="cpu").lm_head.weight, nano.lm_head.weight)
    with pytest.raises(ModelLoadError, match=r"^tokenizer: .* holds no tokenizer files .*model\.tokenizer"):
        load_tokenizer(tmp_path / "m")
    with pytest.raises(ModelLoadError, match=r"^model\.path: .* holds no tokenizer files"):
        load_from_config(ModelConfig(path=str(tmp_path / "m")))


def test_a_lora_adapter_directory_loads_merged_into_its_base(tmp_path, nano, tokenizer_for_tests):
    peft = pytest.importorskip("peft")
    from rlxf.models.loading import merged_state_dict

    base = tmp_path / "base"
    nano.save_pretrained(base)
    tokenizer_for_tests.save_pretrained(base)
    torch.manual_seed(0)
    lora = peft.get_peft_model(load_model(base, device="cpu"),
                               peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")  # adapter_config.json names `base`; no config.json, no tokenizer
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    want = merged_state_dict(lora)
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(want[key], nano.state_dict()[key])  # the adapter changes the weights

    model, tokenizer = load_from_config(ModelConfig(path=str(tmp_path / "adapter")))
    assert type(model).__name__ == "Qwen2ForCausalLM"  # merged: a plain model
    got = model.state_dict()
    assert all(torch.allclose(got[k], v, atol=1e-6) for k, v in want.items())
    assert len(tokenizer) == len(tokenizer_for_tests)  # the base model's tokenizer

    # without its weights file PEFT would try the hub (a network error offline): refused, named
    next(p for p in (tmp_path / "adapter").iterdir() if p.name.startswith("adapter_model")).unlink()
    with pytest.raises(ModelLoadError, match=r"has adapter_config.json but no weights"):
        load_model(tmp_path / "adapter", device="cpu")


def test_a_lora_adapter_without_a_base_says_so(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
    with pytest.raises(ModelLoadError, match=r"names no base model \(base_model_name_or_path\)"):
        load_model(adapter, device="cpu")


def test_a_model_holding_lora_layers_without_its_peft_wrapper_saves_merged(tmp_path, tokenizer_for_tests):
    # get_peft_model injects the LoRA layers into the model in place: the unwrapped model's own
    # state dict has q_proj.base_layer.weight / lora_A keys, which from_pretrained drops
    # (re-initialising q_proj at random) with only a load report
    pytest.importorskip("peft")
    from rlxf.config.model import LoraConfig
    from rlxf.models.factory import build_model
    from rlxf.models.loading import apply_lora, merged_state_dict, save_model, unwrap_model
    from rlxf.rollout import SamplingParams, build_engine

    wrapped = apply_lora(build_model("nano", tokenizer_for_tests, seed=0), LoraConfig(r=2, target_modules=["q_proj"]))
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.fill_(0.1)
    inner = unwrap_model(wrapped)
    want = merged_state_dict(wrapped)
    assert merged_state_dict(inner).keys() == want.keys()
    save_model(inner, tmp_path / "m", tokenizer_for_tests)
    loaded = load_model(tmp_path / "m", device="cpu").state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in want.items())

    sp = SamplingParams(temperature=0.0, max_new_tokens=4, ignore_eos=True)
    for backend in ("native", "hf"):
        got = build_engine(backend, inner, tokenizer_for_tests).generate([[5, 6]], sp)[0][0].response_ids
        assert got == build_engine(backend, wrapped, tokenizer_for_tests).generate([[5, 6]], sp)[0][0].response_ids

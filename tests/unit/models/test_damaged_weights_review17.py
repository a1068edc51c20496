"""A model or adapter directory whose safetensors file is damaged (a copy or save cut short) is a
ModelLoadError naming the file and what to do, not safetensors' bare header error."""

import pytest
import torch

from rlxf.models.loading import ModelLoadError, load_model

transformers = pytest.importorskip("transformers")


def tiny():
    config = transformers.Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config)


def cut(path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_a_truncated_weights_file_is_named(tmp_path, keep):
    tiny().save_pretrained(tmp_path)
    cut(tmp_path / "model.safetensors", keep)
    with pytest.raises(ModelLoadError, match=rf"local directory {tmp_path}: SafetensorError: .* model\.safetensors "
                                             rf"in it is damaged .* copy or save the model again"):
        load_model(tmp_path, device="cpu")


def test_a_truncated_shard_is_named(tmp_path):
    tiny().save_pretrained(tmp_path, max_shard_size="4KB")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 1
    cut(shards[1], 0.5)
    with pytest.raises(ModelLoadError, match=rf"{shards[1].name} in it is damaged"):
        load_model(tmp_path, device="cpu")


def test_a_truncated_adapter_is_named(tmp_path):
    peft = pytest.importorskip("peft")
    tiny().save_pretrained(tmp_path / "base")
    lora = peft.get_peft_model(tiny(), peft.LoraConfig(r=2, target_modules=["q_proj"]))
    lora.save_pretrained(tmp_path / "adapter")
    config = tmp_path / "adapter" / "adapter_config.json"
    config.write_text(config.read_text().replace('"base_model_name_or_path": null',
                                                 f'"base_model_name_or_path": "{tmp_path / "base"}"'))
    cut(tmp_path / "adapter" / "adapter_model.safetensors", 0.5)
    with pytest.raises(ModelLoadError, match=r"adapter .* adapter_model\.safetensors is damaged"):
        load_model(tmp_path / "adapter", device="cpu")

"""``TrainableModel.load`` refuses a checkpoint whose adapters do not fit the model (a changed
``model.lora``) with what differs, instead of a bare KeyError or size mismatch."""

import pytest
import torch

from rlxf.config.model import LoraConfig
from rlxf.config.train import OptimConfig
from rlxf.errors import UserInputError
from rlxf.models.loading import apply_lora
from rlxf.trainer.trainable import TrainableModel

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")


def model(lora: LoraConfig | None):
    config = transformers.Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    torch.manual_seed(0)
    m = transformers.Qwen2ForCausalLM(config)
    return apply_lora(m, lora) if lora else m


def saved(tmp_path, lora):
    core = TrainableModel(model(lora), OptimConfig(lr=1e-2), total_steps=4)
    core.train_step([core.model(torch.tensor([[1, 2, 3]])).logits.pow(2).mean()])
    core.save(tmp_path)
    return tmp_path


QKVO = LoraConfig(r=2, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])


@pytest.mark.parametrize("saved_with, resumed_with, match", [
    (QKVO, None, r"holds 8 LoRA adapter tensors, this config trains the whole model"),
    (None, QKVO, r"saved training the whole model .* this config trains LoRA adapters"),
    (QKVO, LoraConfig(r=4, target_modules=QKVO.target_modules), r"lora_A.default.weight is \(2, 16\) in the checkpoint and \(4, 16\)"),
    (QKVO, LoraConfig(r=2, target_modules=["q_proj"]), r"checkpoint's LoRA adapters include .*k_proj.* \(6 tensors\)"),
    (LoraConfig(r=2, target_modules=["q_proj"]), QKVO, r"this config's LoRA adapters include .*k_proj.* \(6 tensors\)"),
])
def test_a_changed_lora_is_refused_with_what_differs(tmp_path, saved_with, resumed_with, match):
    ckpt = saved(tmp_path, saved_with)
    core = TrainableModel(model(resumed_with), OptimConfig(lr=1e-2), total_steps=4)
    with pytest.raises(UserInputError, match=match) as err:
        core.load(ckpt)
    assert f"model.path={ckpt / 'model'}" in str(err.value)


def test_the_same_lora_resumes_bit_for_bit(tmp_path):
    original = TrainableModel(model(QKVO), OptimConfig(lr=1e-2), total_steps=4)
    original.train_step([original.model(torch.tensor([[1, 2, 3]])).logits.pow(2).mean()])
    original.save(tmp_path)
    resumed = TrainableModel(model(QKVO), OptimConfig(lr=1e-2), total_steps=4)
    resumed.load(tmp_path)
    x = torch.tensor([[3, 4, 5]])
    for core in (original, resumed):
        core.train_step([core.model(x).logits.pow(2).mean()])
    a, b = dict(original.model.named_parameters()), dict(resumed.model.named_parameters())
    assert all(torch.equal(a[k], b[k]) for k in a)

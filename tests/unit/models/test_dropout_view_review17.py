"""``disable_dropout`` gives modules a view of the model's config, not a copy: a later change to
the config (hidden states, attention implementation) reaches them, while dropout stays off."""

import copy
import pickle

import pytest
import torch

from rlxf.trainer.roles import disable_dropout

transformers = pytest.importorskip("transformers")
X = torch.tensor([[1, 2, 3, 4, 5, 6]])


def qwen2(attention_dropout: float = 0.3):
    config = transformers.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attention_dropout=attention_dropout, tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config)


def test_later_config_changes_reach_the_trunk():
    model = disable_dropout(qwen2())
    assert model.model.config is not model.config  # the trunk holds a view
    model.config.output_hidden_states = True
    with torch.no_grad():
        out = model(X)
    assert out.hidden_states is not None and len(out.hidden_states) == 3  # embeddings + 2 layers
    model.config._attn_implementation = "eager"
    attn = model.model.layers[0].self_attn
    assert model.model.config._attn_implementation == "eager" == attn.config._attn_implementation


def test_dropout_stays_off_and_the_saved_config_keeps_it():
    model = disable_dropout(qwen2())
    model.train()
    with torch.no_grad():
        assert torch.equal(model(X).logits, model(X).logits)
    assert model.config.attention_dropout == 0.3 and model.model.config.attention_dropout == 0.0
    view = model.model.config
    assert isinstance(view, transformers.Qwen2Config) and vars(view)["attention_dropout"] == 0.0
    view.use_cache = False  # a write through the view lands in the model's config
    assert model.config.use_cache is False
    assert disable_dropout(model).model.config is view  # a second call keeps the view


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))])
def test_a_copied_model_keeps_a_view_of_its_own_config(clone):
    model = clone(disable_dropout(qwen2()))
    assert model.model.config.attention_dropout == 0.0
    model.config.output_hidden_states = True
    assert model.model.config.output_hidden_states is True

"""``disable_dropout`` removes every random drop of a training-mode forward, including those a
module reads from its config at call time and OPT's layer drop, and leaves the saved config."""

import pytest
import torch

from rlxf.trainer.roles import disable_dropout

transformers = pytest.importorskip("transformers")
X = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])


def build(name: str):
    t = transformers
    small = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, pad_token_id=0, bos_token_id=1,
                 eos_token_id=2)
    torch.manual_seed(0)
    return {
        # Falcon and Persimmon read self.config.attention_dropout / hidden_dropout in forward
        "falcon": lambda: t.FalconForCausalLM(t.FalconConfig(
            **small, num_hidden_layers=2, attention_dropout=0.5, hidden_dropout=0.5)),
        "persimmon": lambda: t.PersimmonForCausalLM(t.PersimmonConfig(
            **small, intermediate_size=64, num_hidden_layers=2, attention_dropout=0.5, hidden_dropout=0.5)),
        # OPT skips whole decoder layers with probability `layerdrop` in training
        "opt": lambda: t.OPTForCausalLM(t.OPTConfig(
            **small, ffn_dim=64, num_hidden_layers=4, max_position_embeddings=64, word_embed_proj_dim=32,
            dropout=0.0, attention_dropout=0.0, layerdrop=0.5)),
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(
            vocab_size=64, n_embd=32, n_layer=2, n_head=4, attn_pdrop=0.5, resid_pdrop=0.5, embd_pdrop=0.5)),
    }[name]()


def spread(model) -> float:
    """Largest difference between the logits of repeated training-mode forwards of X."""
    model.train()
    with torch.no_grad():
        outs = [model(X).logits for _ in range(6)]
    return max((o - outs[0]).abs().max().item() for o in outs)


@pytest.mark.parametrize("name", ["falcon", "persimmon", "opt", "gpt2"])
def test_training_forward_is_deterministic(name):
    assert spread(build(name)) > 1e-3  # teeth: without disable_dropout the forwards differ
    model = build(name)
    config = model.config
    before = config.to_dict()
    assert spread(disable_dropout(model)) == 0.0
    # the model keeps its config object, unchanged: what save_pretrained writes
    assert model.config is config and config.to_dict() == before


def test_saved_config_keeps_the_dropout(tmp_path):
    model = disable_dropout(build("falcon"))
    model.save_pretrained(tmp_path)
    saved = transformers.AutoConfig.from_pretrained(tmp_path)
    assert (saved.attention_dropout, saved.hidden_dropout) == (0.5, 0.5)


def test_modules_sharing_a_config_share_its_copy():
    model = disable_dropout(build("falcon"))
    copies = {id(vars(m)["config"]) for m in model.modules() if "config" in vars(m) and m is not model}
    assert len(copies) == 1 and id(model.config) not in copies


def test_lora_dropout_is_kept():
    peft = pytest.importorskip("peft")
    model = build("falcon")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, lora_dropout=0.25,
                                                      target_modules=["query_key_value"]))
    disable_dropout(lora)
    drops = [m.p for n, m in lora.named_modules() if "lora_dropout" in n and isinstance(m, torch.nn.Dropout)]
    assert drops and all(p == 0.25 for p in drops)
    assert lora.get_base_model().config.attention_dropout == 0.5
    inner = [vars(m)["config"] for m in lora.get_base_model().transformer.modules() if "config" in vars(m)]
    assert inner and all(c.attention_dropout == 0.0 for c in inner)

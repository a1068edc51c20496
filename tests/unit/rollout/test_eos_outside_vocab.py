"""An eos id the model's vocabulary has no row for (a generation_config.json or tokenizer of
another model) never stops a response: the engine build warns once, naming the id, the
vocabulary size and the file it came from, and still builds (tiny test models have such ids)."""

from __future__ import annotations

import logging
import types

import pytest
import torch

from rlxf.rollout.hf import HFEngine
from rlxf.rollout.native.engine import NativeEngine, model_eos_ids

LOGGER = "rlxf.rollout.native.engine"


def _llama(**config):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64, **config)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def llama3_generation_config(tmp_path_factory):
    """A saved 97-token model whose generation_config.json is Llama 3's: eos [2, 128001]."""
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("mismatched") / "model"
    model = _llama(eos_token_id=2)
    model.generation_config.eos_token_id = [2, 128001]
    model.save_pretrained(folder)
    return folder, LlamaForCausalLM.from_pretrained(folder).eval()


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


@pytest.mark.parametrize("engine", [NativeEngine, HFEngine])
def test_an_engine_build_warns_once_naming_the_id_the_vocabulary_and_the_file(engine, llama3_generation_config,
                                                                              caplog):
    folder, model = llama3_generation_config
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        built = engine(model)
    [warning] = _warnings(caplog)
    assert f"128001 from {folder}/generation_config.json" in warning
    assert "vocabulary of 97 tokens (ids 0..96)" in warning
    assert "2 from" not in warning   # the id in range is not named
    assert built.eos_ids == (2, 128001)   # kept, not refused


def test_an_id_from_config_json_is_named_once_under_that_file(caplog):
    # no generation_config.json: transformers copies config.json's ids into the generation config
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert model_eos_ids(_llama(eos_token_id=300)) == (300,)
    [warning] = _warnings(caplog)
    assert "300 from the model's config.json." in warning and "generation_config.json" not in warning


def test_an_id_both_files_hold_names_both(tmp_path, caplog):
    from transformers import LlamaForCausalLM

    _llama(eos_token_id=300).save_pretrained(tmp_path)   # writes a generation_config.json with 300 too
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        model_eos_ids(LlamaForCausalLM.from_pretrained(tmp_path))
    [warning] = _warnings(caplog)
    assert f"300 from {tmp_path}/generation_config.json, {tmp_path}/config.json." in warning


def test_an_id_from_the_tokenizer_names_its_file_and_token(caplog):
    model = _llama(eos_token_id=2)
    tokenizer = types.SimpleNamespace(name_or_path="tokenizers/llama3", eos_token="<|eot_id|>", eos_token_id=128009)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert model_eos_ids(model, tokenizer) == (2, 128009)
    [warning] = _warnings(caplog)
    assert "128009 from tokenizers/llama3/tokenizer_config.json (eos_token '<|eot_id|>')" in warning


def test_ids_inside_the_vocabulary_warn_nothing(caplog):
    model = _llama(eos_token_id=96)   # the last id of 97
    tokenizer = types.SimpleNamespace(name_or_path="", eos_token="</s>", eos_token_id=0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert model_eos_ids(model, tokenizer) == (96, 0)
    assert _warnings(caplog) == []

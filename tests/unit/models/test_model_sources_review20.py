"""Model loading as a user on another machine meets it: model.revision with a local directory
(from_pretrained ignored it), a mistyped path read as a hub id, a directory holding part of a
model, sharded weights without their index."""

from __future__ import annotations

import json
import socket
import sys

import huggingface_hub.constants
import pytest
import torch
from safetensors.torch import save_file

from rlxf.config.model import ModelConfig
from rlxf.models.loading import ModelLoadError, check_source, load_model, tokenizer_from_config
from rlxf.models.paths import ADAPTER_CONFIG
from rlxf.models.value_model import ValueModel

TINY_QWEN2 = {
    "model_type": "qwen2",
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 32,
}


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """cwd is ``tmp_path``, the hub cache is empty, HF_HUB_OFFLINE=1, and no name resolves: a test
    that reached the network would fail at once."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(sys, "path", list(sys.path))

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    return tmp_path


def _model_dir(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(TINY_QWEN2))
    return path


def test_a_revision_with_a_local_model_directory_is_refused_naming_both_fields(tmp_path):
    model = _model_dir(tmp_path / "model")
    with pytest.raises(ModelLoadError) as e:
        tokenizer_from_config(ModelConfig(path=str(model), revision="v1.0"))
    msg = str(e.value)
    assert msg.startswith(f"model.path {model} is a local directory, so model.revision='v1.0' cannot apply")
    assert "Remove model.revision" in msg and "set model.path to the hub id" in msg
    # every loader of a model.path with model.revision goes through the same check
    with pytest.raises(ModelLoadError, match="model.revision='v1.0' cannot apply"):
        load_model(model, revision="v1.0")
    with pytest.raises(ModelLoadError, match="model.revision='v1.0' cannot apply"):
        ValueModel.from_pretrained(model, revision="v1.0")
    assert check_source(model, "model.path") == str(model)  # without a revision: the directory


def test_a_revision_is_checked_against_the_base_model_of_a_lora_adapter(tmp_path):
    base = _model_dir(tmp_path / "base")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / ADAPTER_CONFIG).write_text(json.dumps({"base_model_name_or_path": str(base)}))
    # the adapter is local, its base may be a hub id the revision pins: the adapter passes ...
    assert check_source(adapter, "model.path", adapters=True, revision="v1.0") == str(adapter)
    # ... and the local base it names is refused, as model.path itself would be
    with pytest.raises(ModelLoadError) as e:
        load_model(adapter, revision="v1.0")
    assert f"the LoRA adapter {adapter} {base} is a local directory, so model.revision='v1.0'" in str(e.value)


def test_a_mistyped_local_path_read_as_a_hub_id_says_why(offline, monkeypatch):
    _model_dir(offline / "models" / "nano")
    with pytest.raises(ModelLoadError) as e:
        load_model("model/nano")
    msg = str(e.value)
    assert "There is no local directory model/nano" in msg and f"working directory, {offline}" in msg
    assert "HF_HUB_OFFLINE=1 is set" in msg and str(offline / "hf-cache") in msg
    assert "set HF_HUB_OFFLINE=1" not in msg  # it is set: that advice was the wrong one
    assert msg.endswith("Did you mean models/nano?")
    # the hub out of reach (not offline by choice): refused before any download, with the same hint
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(ModelLoadError, match=r"cannot be reached.*Did you mean models/nano\?$"):
        check_source("model/nano", "model.path")


def test_a_directory_holding_part_of_a_model_says_what_it_lacks(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    with pytest.raises(
        ModelLoadError, match=r"tok holds no model\. It holds only a tokenizer \(tokenizer\.json\)"
    ):
        tokenizer_from_config(ModelConfig(path=str(tok)))
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"")
    with pytest.raises(
        ModelLoadError, match=r"holds weights \(model\.safetensors\) but not the config\.json"
    ):
        load_model(weights)


def test_weight_shards_without_their_index_are_named(tmp_path):
    model = _model_dir(tmp_path / "sharded")
    for i in (1, 2):
        save_file({"x": torch.zeros(1)}, str(model / f"model-0000{i}-of-00002.safetensors"))
    with pytest.raises(ModelLoadError) as e:
        load_model(model, device="cpu")
    msg = str(e.value)
    assert "It holds 2 weight shards (model-00001-of-00002.safetensors, ...)" in msg
    assert "not their index model.safetensors.index.json" in msg and "damaged" not in msg

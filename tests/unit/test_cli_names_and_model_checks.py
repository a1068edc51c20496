"""Configuration, the CLI and model loading: names shown as written in
`rlxf explain`, the dtype and offloading `rlxf explain` states for the machine it runs on, and
model directories refused with a message saying why (a LoRA adapter, a tokenizer that is not the
model's) or warned about (a half-precision dtype this CPU emulates)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from rlxf.cli.explain import _titled_table
from rlxf.cli.main import main
from rlxf.config import Config
from rlxf.config.explain import offload_note, resolved_dtype
from rlxf.models import loading
from rlxf.models.loading import ModelLoadError, check_source, check_vocab, slow_cpu_dtype
from rlxf.models.paths import ModelPathError, resolve_model_dir


def test_explain_tables_show_source_names_as_written():
    console = Console(record=True, width=200)
    _titled_table(console, "data mixture", ("source", "weight"), [("easy[bold] (arithmetic)", "1"),
                                                                   ("hard[red]x (arithmetic)", "1")])
    text = console.export_text()
    assert "easy[bold] (arithmetic)" in text and "hard[red]x (arithmetic)" in text


BASE = {"model": {"path": "m"}, "data": {"task": "arithmetic"}}


def test_explain_states_the_dtype_and_offloading_that_train_uses_on_a_cuda_machine(monkeypatch):
    cfg = Config.model_validate(BASE)              # model.device and model.dtype: auto
    assert resolved_dtype(cfg) == "float32" and offload_note(cfg) == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolved_dtype(cfg) == "bfloat16"       # what load_model picks for auto on CUDA
    assert "pinned host memory" in offload_note(cfg)[0]
    cpu = Config.model_validate({**BASE, "model": {"path": "m", "device": "cpu"}})
    assert resolved_dtype(cpu) == "float32" and offload_note(cpu) == []


def test_a_lora_adapter_directory_is_refused_with_its_base_and_how_to_merge(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base", "r": 8}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(ModelPathError, match=r"(?s)LoRA adapter .*'org/base'.*merge_and_unload.*model\.lora\.r"):
        resolve_model_dir(adapter)
    with pytest.raises(ModelLoadError, match=r"(?s)^model\.path: .* is a LoRA adapter"):  # not "model.path path:"
        check_source(adapter, "model.path")


def _model_with_vocab(vocab: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1))


def test_a_tokenizer_with_more_tokens_than_the_model_has_embeddings_is_refused(tmp_path, tokenizer_for_tests):
    with pytest.raises(ModelLoadError, match=r"model.tokenizer t has 4,096 tokens but model.path m has only 1,000"):
        check_vocab(_model_with_vocab(1000), tokenizer_for_tests, model_what="model.path m",
                    tokenizer_what="model.tokenizer t")
    check_vocab(_model_with_vocab(4160), tokenizer_for_tests, model_what="m", tokenizer_what="t")  # padded: fine
    small = tmp_path / "small"
    _model_with_vocab(1000).save_pretrained(small)
    tokenizer_for_tests.save_pretrained(small)
    assert main(["generate", str(small), "1+2=", "--max-new-tokens", "1"]) == 2
    # every other loader of a saved model checks the pair too: a judge, a reward model
    from rlxf.rewards.judge import EngineChatClient
    from rlxf.rewards.reward_model import RewardModelVerifier

    with pytest.raises(ModelLoadError, match="judge model"):
        EngineChatClient.from_path(str(small))
    rm = SimpleNamespace(path=str(small), device="cpu", normalize="none", label="rm", batch_size=1, max_length=8,
                         clip=None)
    with pytest.raises(ModelLoadError, match="reward model"):
        RewardModelVerifier.from_config(rm)


def test_a_half_precision_dtype_this_cpu_emulates_is_warned_about(monkeypatch, caplog):
    cpu = torch.device("cpu")
    monkeypatch.setattr(loading, "cpu_has_half_kernels", lambda dtype: False)
    assert "model.dtype=float16" in slow_cpu_dtype(cpu, torch.float16)
    assert slow_cpu_dtype(cpu, torch.float32) is None
    with caplog.at_level(logging.WARNING, logger="rlxf"):
        loading.warn_slow_cpu_dtype(cpu, torch.bfloat16)
    assert "model.dtype=bfloat16" in caplog.text and "float32" in caplog.text
    monkeypatch.setattr(loading, "cpu_has_half_kernels", lambda dtype: True)
    assert slow_cpu_dtype(cpu, torch.float16) is None


def test_explain_warns_when_this_machine_cannot_run_the_device_asked_for(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from rlxf.cli.explain import machine_problems

    assert machine_problems(Config.model_validate({**BASE, "model": {"path": "m", "device": "cuda"}}))
    assert machine_problems(Config.model_validate(BASE)) == []            # auto: the CPU here
    cluster = {**BASE, "model": {"path": "m", "device": "cuda"}, "run": {"name": "r", "placement": "ray"},
               "ray": {"address": "ray://head:10001"}}
    assert machine_problems(Config.model_validate(cluster)) == []         # its models load on the cluster


def test_explain_reads_a_lora_adapters_architecture_from_its_base(tmp_path, nano_model_dir):
    """A training config's model.path takes an adapter directory (merged into its base as it
    loads); explain refused it as no model."""
    from rlxf.cli.explain import _model_dims

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(nano_model_dir), "r": 8}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    assert _model_dims(str(adapter), False) == _model_dims(str(nano_model_dir), False)

"""Build a fresh Qwen2-architecture model + tokenizer from a size preset, offline.

    init_model("tiny", "models/tiny", seed=0)   # ~3.4M parameters, a few seconds on CPU

Deterministic: the same preset and seed give the same weights and tokenizer, byte for byte.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from rlxf.models.presets import get_preset
from rlxf.models.tokenizer import ENDOFTEXT, IM_END, PAD, train_tokenizer


def build_model(preset: str, tokenizer, seed: int = 0):
    """A randomly initialised ``Qwen2ForCausalLM`` (float32, CPU) sized by ``preset``."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    p = get_preset(preset)
    eos = tokenizer.convert_tokens_to_ids(IM_END)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_layers,
        num_attention_heads=p.num_heads,
        num_key_value_heads=p.num_kv_heads,
        max_position_embeddings=p.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": p.rope_theta},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
        dtype="float32",
    )
    # Seed a private generator state: init must not depend on, or disturb, the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos, tokenizer.convert_tokens_to_ids(ENDOFTEXT)],
        pad_token_id=config.pad_token_id,
        do_sample=True,
    )
    return model


def init_model(preset: str, out_dir: str | Path, seed: int = 0, overwrite: bool = False,
               tokenizer=None) -> Path:
    """Write a new model and its tokenizer to ``out_dir`` (HF format, safetensors).

    Also writes ``rlxf_init.json`` (preset, seed, parameter count). Raises FileExistsError when
    ``out_dir`` is a non-empty directory and ``overwrite`` is False, and whatever ``overwrite``
    when it is not a model directory (no config.json; a file) or is an rlxf run: replacing
    deletes only a model. ``tokenizer`` reuses one from ``train_tokenizer()`` (it is the same
    for every preset and seed) to skip training it.
    """
    from rlxf.models.loading import count_parameters, match_permissions
    from rlxf.run_dir import looks_like_run

    get_preset(preset)  # unknown names fail before any work
    out = Path(out_dir)
    # a directory inside a run (runs/x/checkpoints/step_N/model) holds trained weights: never
    # replaced by random ones, as the run itself is not
    run = next((p for p in out.resolve().parents if looks_like_run(p)), None)
    if run is not None:
        raise FileExistsError(f"{out} is inside the rlxf run directory {run} (its trained checkpoints are there); "
                              f"init-model does not write into a run: give a directory outside it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if out.is_dir() and looks_like_run(out):
            raise FileExistsError(f"{out} is an rlxf run directory (its trained checkpoints are in it); init-model "
                                  f"does not replace a run: give another directory")
        if not out.is_dir() or not (out / "config.json").is_file():
            raise FileExistsError(f"{out} already exists and is not a model directory (no config.json); init-model "
                                  f"replaces only a model: give another directory")
        if not overwrite:
            raise FileExistsError(f"{out} already exists and is not empty; pass --overwrite to replace it")
        shutil.rmtree(out)
    tokenizer = tokenizer if tokenizer is not None else train_tokenizer()
    model = build_model(preset, tokenizer, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    info = {"preset": preset, "seed": seed, "parameters": count_parameters(model),
            "vocab_size": len(tokenizer), "architecture": "Qwen2ForCausalLM"}
    (out / "rlxf_init.json").write_text(json.dumps(info, indent=2) + "\n")
    match_permissions(out)
    return out

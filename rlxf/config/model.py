"""Which model to train and how to load it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlxf.config.base import Section


class LoraConfig(Section):
    r: int = Field(0, ge=0, description="LoRA rank; 0 disables LoRA (full fine-tuning). Needs `rlxf[peft]`.")
    alpha: int = Field(16, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Module names LoRA adapters attach to, matched as PEFT does (a module whose name is "
        "this or ends in `.this`: `q_proj`, `self_attn.q_proj`); linear layers and embeddings only, and not "
        "an output head tied to the input embedding (tie_word_embeddings), which the engines cannot sample.",
    )


class ModelConfig(Section):
    path: str = Field(
        ...,
        description="Hugging Face hub id or local directory of a causal LM (and its tokenizer). "
        "`rlxf init-model --preset tiny OUT` makes one locally.",
    )
    tokenizer: str | None = Field(None, description="Tokenizer path or hub id, if not the model's.")
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) of model.path's "
                                 "repository (a model.tokenizer from another repository is read at its default).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Parameter dtype. `auto`: float32 on CPU, bfloat16 on CUDA."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Device for training. `auto`: CUDA when available, else CPU."
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass to save memory."
    )
    trust_remote_code: bool = Field(False, description="Allow model code from the hub repository.")
    chat_template: str | None = Field(
        None, description="Jinja chat template overriding the tokenizer's own (text, or a path to a file)."
    )
    attn_implementation: str = Field(
        "sdpa",
        description="transformers attention kernel for training forwards: `sdpa` (default), `eager`, "
        "`flash_attention_2` (CUDA with flash-attn installed; packed micro-batches then need no mask).",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapters (PEFT).")
    linear_kernels: Literal["auto", "onednn", "torch"] = Field(
        "auto",
        description="Matmuls of the linear layers in training forwards/backwards: `auto` runs them on "
        "oneDNN for CPU float32 models when it works here and measured faster than torch's own on this "
        "machine (a short calibration, cached per CPU model, torch version and thread count under "
        "~/.cache/rlxf; it also decides the rollout engine's weight packing; `rlxf explain` shows the "
        "choice and the figures), else torch's own; `onednn` insists; `torch` always F.linear. The native "
        "engine's matmuls are oneDNN wherever it works, whatever was faster: its rows round the same "
        "whatever the batch, so a sequence's samples do not depend on what it was batched with.",
    )
    logprob_chunk_size: int = Field(
        1024, ge=1,
        description="Response tokens per chunk when turning hidden states into log-probs, so the full "
        "(tokens x vocab) logits tensor is never held at once (with grad, each chunk is recomputed in "
        "the backward pass instead of kept).",
    )

    @property
    def tokenizer_revision(self) -> str | None:
        """``revision`` where the tokenizer is ``path``'s own; a ``tokenizer`` from another
        repository is read at its default revision (that commit or tag is not in it)."""
        return self.revision if not self.tokenizer or self.tokenizer == self.path else None

"""A scalar head on a causal LM's trunk: the PPO critic V(s_t) and the reward model r(x, y).

    critic = ValueModel.from_pretrained("models/tiny")          # trunk from a causal LM, new head
    values = sequence_values(critic, prompt_ids, response_ids)  # (B, T): V(s_t) before each a_t
    scores = sequence_scores(rm, prompt_ids, response_ids)      # (B,): value after the last token
    critic.save_pretrained("out/critic")                        # trunk (HF) + value_head.safetensors

A saved directory holds the trunk in HF format (``AutoModel.from_pretrained`` reads it) and
``value_head.safetensors`` with the head's ``weight`` (1, H) and ``bias`` (1,). With LoRA on
the trunk (``from_pretrained(..., lora=...)``: adapters on the trunk, the head trained in full)
the trunk is saved with the adapters merged, so the directory loads without PEFT.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch

from rlxf.config.model import LoraConfig
from rlxf.models.kernels import LinearKernels, use_fast_linears
from rlxf.models.loading import (
    ModelLoadError,
    apply_lora,
    check_loaded,
    check_source,
    enable_checkpointing,
    hub_error,
    load_errors,
    match_permissions,
    merged_state_dict,
    resolve_device,
    resolve_dtype,
    unwrap_model,
)
from rlxf.models.logprobs import (
    auto_row_tokens,
    check_pairs,
    hidden_states_at,
    pad_ragged,
    padding_id,
    response_mask,
)

HEAD_FILE = "value_head.safetensors"


class ValueModel(torch.nn.Module):
    """``value(h_t) = w · h_t + b`` on the last hidden state of a decoder trunk.

    A new head starts at zero (w = 0, b = 0): every state is worth 0 until trained, which is
    the neutral start for both a critic and a Bradley–Terry reward model, and gradients still
    reach w at once (dV/dw = h_t).
    """

    def __init__(self, trunk: torch.nn.Module, value_head: torch.nn.Linear | None = None):
        super().__init__()
        self.trunk = trunk
        hidden = trunk.config.hidden_size
        if value_head is None:
            p = next(trunk.parameters())
            value_head = torch.nn.Linear(hidden, 1, device=p.device, dtype=p.dtype)
            torch.nn.init.zeros_(value_head.weight)
            torch.nn.init.zeros_(value_head.bias)
        self.value_head = value_head

    @property
    def config(self):
        return self.trunk.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) ids -> (B, L) float32 values, one per position."""
        out = self.trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=False)
        return self.value_head(out.last_hidden_state).squeeze(-1).float()

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype = "auto",
        gradient_checkpointing: bool = False,
        revision: str | None = None,
        trust_remote_code: bool = False,
        attn_implementation: str | None = "sdpa",
        linear_kernels: LinearKernels = "auto",
        lora: LoraConfig | None = None,
    ) -> ValueModel:
        """The trunk of a causal LM or of a saved ValueModel; the head from ``value_head.safetensors``
        when the directory has one, else a new zero head. With ``lora.r > 0`` the trunk is wrapped
        in LoRA adapters (its own weights frozen) and the head stays fully trainable."""
        from transformers import AutoModel

        source = check_source(path, "value model", revision=revision)
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        kwargs = {"dtype": dt, "revision": revision, "trust_remote_code": trust_remote_code}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        try:
            trunk, info = AutoModel.from_pretrained(source, output_loading_info=True, **kwargs)
        except load_errors() as e:
            raise hub_error(source, e) from None
        check_loaded(source, trunk, info, "value model")
        trunk.to(dev)
        trunk.config.use_cache = False
        if gradient_checkpointing:
            enable_checkpointing(trunk)
        model = cls(trunk)
        use_fast_linears(model, linear_kernels)
        head_file = Path(source) / HEAD_FILE
        if head_file.is_file():
            from safetensors.torch import load_file

            state = load_file(str(head_file))
            want = {"weight": (1, trunk.config.hidden_size), "bias": (1,)}
            got = {k: tuple(v.shape) for k, v in state.items()}
            if got != want:
                raise ModelLoadError(f"{head_file} holds {got}, expected {want} for this trunk")
            model.value_head.load_state_dict({k: v.to(dt) for k, v in state.items()})
        if lora is not None and lora.r > 0:
            model.trunk = apply_lora(model.trunk, lora, task_type="FEATURE_EXTRACTION")
        return model

    def save_pretrained(self, out_dir: str | Path, tokenizer=None) -> Path:
        from safetensors.torch import save_file

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        unwrap_model(self.trunk).save_pretrained(str(out), state_dict=merged_state_dict(self.trunk),
                                                 safe_serialization=True)
        head = {k: v.detach().contiguous().cpu() for k, v in self.value_head.state_dict().items()}
        save_file(head, str(out / HEAD_FILE))
        (out / "rlxf_value_model.json").write_text(json.dumps({"head": HEAD_FILE, "kind": "value"}) + "\n")
        if tokenizer is not None:
            tokenizer.save_pretrained(str(out))
        match_permissions(out)
        return out


def _values_at(model: ValueModel, sequences, positions, packed, max_tokens_per_row) -> torch.Tensor:
    pad_id = padding_id(model.trunk)
    if max_tokens_per_row == "auto":
        max_tokens_per_row = auto_row_tokens(model.trunk, [len(s) for s in sequences])
    hidden = hidden_states_at(model.trunk, sequences, positions, packed=packed,
                              max_tokens_per_row=max_tokens_per_row, pad_id=pad_id)
    return model.value_head(hidden).squeeze(-1).float()


def sequence_values(
    model: ValueModel,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    *,
    packed: bool = True,
    max_tokens_per_row: int | Literal["auto"] | None = "auto",
) -> torch.Tensor:
    """(B, T) float32 V(s_t): the value read at position P_i - 1 + t, the state before a_t.

    Aligned with ``sequence_logprobs`` (the same positions); 0 past each response.
    """
    check_pairs(prompt_ids, response_ids)
    lengths = [len(r) for r in response_ids]
    if sum(lengths) == 0:
        return response_mask(response_ids, device=next(model.parameters()).device)
    sequences = [p + r[:-1] for p, r in zip(prompt_ids, response_ids, strict=True)]
    positions = [torch.arange(len(p) - 1, len(p) - 1 + len(r)) for p, r in zip(prompt_ids, response_ids, strict=True)]
    return pad_ragged(_values_at(model, sequences, positions, packed, max_tokens_per_row), lengths)


def sequence_scores(
    model: ValueModel,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    *,
    packed: bool = True,
    max_tokens_per_row: int | Literal["auto"] | None = "auto",
) -> torch.Tensor:
    """(B,) float32 reward-model scores: the value at the last token of prompt + response."""
    check_pairs(prompt_ids, response_ids)
    sequences = [p + r for p, r in zip(prompt_ids, response_ids, strict=True)]
    positions = [torch.tensor([len(s) - 1]) for s in sequences]
    return _values_at(model, sequences, positions, packed, max_tokens_per_row)

"""The native engine's KV cache: one region per prompt, one row per sequence.

    prompt: (L, 2, G_max, Hkv, P, D)   keys/values of each live prompt, shared by its samples
    gen:    (L, 2, S_max, Hkv, W, D)   keys/values of each live sequence's generated tokens

Both are allocated once per ``generate`` call (and released at its end) and kept dense: live
prompts occupy slots [0, G), live sequences rows [0, B); when one finishes, the last live one
moves into its place (``move_*``), so every decode step reads one contiguous block.

The generated width W follows the longest live sequence, rounded up to ``chunk`` tokens
(grown, and shrunk when long sequences leave). Attention multiplies each sequence's whole
(W, D) block: a block that is contiguous in memory is what ``bmm`` runs on without first
copying it, and W - T < chunk keeps the masked-out part small.

Every row or slot is zeroed before first use: masked positions then hold finite values, and
0-probability x finite value = 0 in the attention output (garbage memory could hold NaN).
"""

from __future__ import annotations

import torch

from rlxf.rollout.native.model import ModelSpec


class KVCache:
    def __init__(self, spec: ModelSpec, device, dtype, chunk: int = 32):
        self.spec, self.device, self.dtype, self.chunk = spec, device, dtype, chunk
        self.prompt: torch.Tensor | None = None
        self.gen: torch.Tensor | None = None
        self.gen_limit = 0
        self.peak_bytes = 0   # the most both buffers held at once during the current call

    def _empty(self, rows: int, width: int) -> torch.Tensor:
        s = self.spec
        return torch.empty(s.num_layers, 2, rows, s.num_kv_heads, width, s.head_dim, device=self.device, dtype=self.dtype)

    def start(self, prompts: int, prompt_width: int, seqs: int, max_gen: int) -> None:
        """Buffers for one call: ``prompts`` slots of ``prompt_width``, ``seqs`` rows of up to ``max_gen``."""
        self.prompt = None
        self.prompt = self._empty(prompts, prompt_width)
        self.gen = None
        self.gen_limit = max_gen
        self.gen = self._empty(seqs, min(self.chunk, max_gen))
        self.peak_bytes = self.nbytes()

    def release(self) -> None:
        """Drop the buffers (a call's ``start`` allocates new ones)."""
        self.prompt = self.gen = None

    @property
    def width(self) -> int:
        return self.gen.shape[4]

    def fit(self, needed: int, live: int) -> None:
        """Make the generated width hold ``needed`` positions (rows [0, live) are kept)."""
        target = min(-(-needed // self.chunk) * self.chunk, self.gen_limit)
        if target > self.width or target < self.width - self.chunk:
            old, keep = self.gen, min(self.width, target)
            self.gen = self._empty(old.shape[2], target)
            self.gen[:, :, :live, :, :keep] = old[:, :, :live, :, :keep]
            if target > keep:
                self.gen[:, :, :live, :, keep:] = 0
            del old
            self.peak_bytes = max(self.peak_bytes, self.nbytes())

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.prompt, self.gen) if t is not None)

    # --- reads, in the (batch*Hkv, width, D) layout bmm wants -------------------------------
    def prompt_kv(self, layer: int, g: int) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self.prompt[layer, :, :g]
        return kv[0].flatten(0, 1), kv[1].flatten(0, 1)

    def gen_kv(self, layer: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self.gen[layer, :, :b]
        return kv[0].flatten(0, 1), kv[1].flatten(0, 1)

    # --- writes ----------------------------------------------------------------------------
    def write_gen(self, layer: int, kv: torch.Tensor, at: torch.Tensor) -> None:
        """kv (B, 2, Hkv, D): row b's key and value go to generated position ``at[b]``."""
        rows = torch.arange(kv.shape[0], device=kv.device)
        self.gen[layer][:, rows, :, at] = kv

    def write_prompt(self, layer: int, slots: torch.Tensor, kv: torch.Tensor) -> None:
        """kv (G, P', 2, Hkv, D) of prompts going to prompt slots ``slots`` (G,); columns >= P' are zeroed."""
        p = kv.shape[1]
        self.prompt[layer, :, :, :, :p].index_copy_(1, slots, kv.permute(2, 0, 3, 1, 4))
        if p < self.prompt.shape[4]:
            self.prompt[layer, :, :, :, p:].index_fill_(1, slots, 0)

    def clear_rows(self, lo: int, hi: int) -> None:
        self.gen[:, :, lo:hi] = 0

    # --- compaction --------------------------------------------------------------------------
    def move_gen(self, src: torch.Tensor, dst: torch.Tensor, width: int) -> None:
        self.gen[:, :, dst, :, :width] = self.gen[:, :, src, :, :width]

    def move_prompt(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.prompt[:, :, dst] = self.prompt[:, :, src]

"""Per-token log-probs, entropies and values of responses given their prompts.

This is the trainer's hot path (policy, old policy, reference, critic). For sequence i with
prompt p_i (P_i ids) and response a_i (R_i ids), row i of every (B, T) output holds, for
t < R_i,

    logprobs[i, t] = log softmax(z_t / temperature)[a_t]        z_t = logits at position P_i - 1 + t
    entropy[i, t]  = -sum_v softmax(z_t / temperature)_v * log softmax(z_t / temperature)_v
    values[i, t]   = V(s_t), the value head read at the same position (the state before a_t)

and 0 for t >= R_i (T = the longest response). Three things keep it cheap:

* **Packing.** All sequences of a micro-batch are concatenated into one row with position ids
  restarting at 0 per sequence; transformers derives a block-diagonal causal mask from the
  position ids (``masking_utils.find_packed_sequence_indices``; flash-attention uses the same
  position ids), so attention never crosses a sequence border and no compute goes to padding.
  ``packed=False`` runs the right-padded batch instead (the reference the tests compare with).
* **Only response positions reach the head.** The trunk's hidden states are gathered at the
  positions that predict response tokens before the (tokens x vocab) output projection.
* **Chunks.** The head + log-softmax run on ``chunk_size`` positions at a time, so the logits
  of the whole batch never exist at once. With autograd on, each chunk is checkpointed: only
  its (chunk x hidden) input is kept for the backward pass, where its logits are recomputed.
  That costs one extra head matmul per chunk in the backward pass (the head's forward is a
  third of its forward+backward), and cuts what is held for the backward pass from the fp32
  logits of every response token (twice that with entropy: the softmax too) to their
  (tokens x hidden) inputs (checked in ``tests/unit/models/test_logprobs.py``).
  A single chunk is not checkpointed: nothing else would be computed while its logits are held.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from rlxf.models.loading import unwrap_model


@dataclass
class LogprobOutput:
    logprobs: torch.Tensor               # (B, T) float32 log π(a_t | s_t), 0 past each response
    entropy: torch.Tensor | None          # (B, T) float32 H(π(· | s_t)) when asked for, else None
    mask: torch.Tensor                    # (B, T) float32, 1 on response tokens


def response_mask(response_ids: list[list[int]], device: torch.device | None = None) -> torch.Tensor:
    """(B, T) float mask, 1 where ``t < len(response_ids[i])``."""
    lengths = torch.tensor([len(r) for r in response_ids], device=device)
    width = int(lengths.max()) if len(response_ids) else 0
    return (torch.arange(width, device=device)[None, :] < lengths[:, None]).float()


def check_pairs(prompt_ids: list[list[int]], response_ids: list[list[int]]) -> None:
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"got {len(prompt_ids)} prompts but {len(response_ids)} responses; they pair up one to one")
    for i, p in enumerate(prompt_ids):
        if not p:
            raise ValueError(
                f"prompt {i} is empty: the first response token needs at least one prompt token "
                f"(e.g. a BOS or chat-template token) to be predicted from"
            )


def pack_rows(lengths: list[int], max_tokens_per_row: int | None) -> list[list[int]]:
    """Group sequence indices into rows of at most ``max_tokens_per_row`` tokens.

    First-fit decreasing: longest sequences first, each into the first row with room, so rows
    end up nearly full. ``None`` puts everything in one row. A sequence longer than the limit
    gets a row to itself. Deterministic (ties keep input order).
    """
    if not lengths:
        return []
    if max_tokens_per_row is None:
        return [list(range(len(lengths)))]
    rows: list[list[int]] = []
    used: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        for r in range(len(rows)):
            if used[r] + lengths[i] <= max_tokens_per_row:
                rows[r].append(i)
                used[r] += lengths[i]
                break
        else:
            rows.append([i])
            used.append(lengths[i])
    return rows


def auto_row_tokens(model, lengths: list[int], min_row_tokens: int = 256) -> int | None:
    """Row width for packing: one row for varlen attention kernels, else bounded rows.

    Flash-attention (and flex attention) turn restarting position ids into per-sequence
    attention, so one long row costs nothing extra. sdpa and eager get a dense (row x row)
    block-diagonal mask and compute all of it, so a row of N tokens costs O(N^2) attention:
    rows as wide as the longest sequence (at least ``min_row_tokens``) keep that O(N x width).
    On CPU, 32 sequences of 24-208 tokens (tiny preset): one row 0.42 s, rows of 256 0.20 s,
    padded 0.31 s (no grad; with grad 1.20 / 0.58 / 0.92 s).
    """
    impl = str(getattr(unwrap_model(model).config, "_attn_implementation", "") or "")
    if "flash" in impl or "flex" in impl:
        return None
    return max(max(lengths, default=0), min_row_tokens)


def hidden_states_at(
    trunk: torch.nn.Module,
    sequences: list[list[int]],
    positions: list[torch.Tensor],
    *,
    packed: bool = True,
    max_tokens_per_row: int | None = None,
    pad_id: int = 0,
) -> torch.Tensor:
    """Run the decoder trunk over ``sequences``; return the last hidden states at ``positions``.

    ``positions[i]`` are indices into sequence i. Returns (sum_i len(positions[i]), H), in
    order of i then position. Works under no_grad and with autograd.
    """
    device = next(trunk.parameters()).device
    lengths = [len(s) for s in sequences]
    if packed:
        rows = pack_rows(lengths, max_tokens_per_row)
        width = max(sum(lengths[i] for i in row) for row in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        pos = torch.zeros((len(rows), width), dtype=torch.long)
        flat_start = [0] * len(sequences)
        for r, row in enumerate(rows):
            col = 0
            for i in row:
                n = lengths[i]
                ids[r, col:col + n] = torch.tensor(sequences[i])
                pos[r, col:col + n] = torch.arange(n)
                flat_start[i] = r * width + col
                col += n
            # Padding continues the last sequence's positions: it sits after it (causal), so it
            # cannot change any real token, and it does not look like a new sequence.
            last = pos[r, col - 1] if col else -1
            pos[r, col:] = torch.arange(1, width - col + 1) + last
        out = trunk(input_ids=ids.to(device), position_ids=pos.to(device), attention_mask=None, use_cache=False)
    else:
        width = max(lengths)
        ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(sequences), width), dtype=torch.long)
        for i, s in enumerate(sequences):
            ids[i, :len(s)] = torch.tensor(s)
            attn[i, :len(s)] = 1
        flat_start = [i * width for i in range(len(sequences))]
        out = trunk(input_ids=ids.to(device), attention_mask=attn.to(device), use_cache=False)
    hidden = out.last_hidden_state
    hidden = hidden.reshape(-1, hidden.shape[-1])
    index = torch.cat([p.to(torch.long) + s for p, s in zip(positions, flat_start, strict=True)])
    return hidden.index_select(0, index.to(device))


def _head_chunk(hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module, temperature: float,
                softcap: float | None, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if softcap:  # Gemma-2 style final logit soft-capping, applied before temperature as in sampling
        logits = torch.tanh(logits / softcap) * softcap
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - logz
    if with_entropy:
        # H = logZ - sum_v p_v z_v  (the same as -sum p log p, without forming log p)
        entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    else:
        entropy = logp.new_zeros(())
    return logp, entropy


def causal_lm_parts(model) -> tuple[torch.nn.Module, torch.nn.Module, float | None]:
    """(decoder trunk, output head, logit soft-cap) of a transformers causal LM or a PEFT wrapper."""
    base = unwrap_model(model)
    trunk = getattr(base, base.base_model_prefix, None)
    head = base.get_output_embeddings()
    if trunk is None or head is None:
        raise TypeError(
            f"{type(base).__name__} is not a causal LM with a `{base.base_model_prefix}` trunk and an "
            f"output embedding; sequence_logprobs needs a *ForCausalLM model"
        )
    return trunk, head, getattr(base.config, "final_logit_softcapping", None)


def pad_ragged(flat: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """(sum R_i,) -> (B, max R_i), right-padded with 0; differentiable."""
    width = max(lengths, default=0)
    if width == 0:
        return flat.new_zeros((len(lengths), 0))
    parts = [F.pad(x, (0, width - x.shape[0])) for x in torch.split(flat, lengths)]
    return torch.stack(parts)


def sequence_logprobs(
    model,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    packed: bool = True,
    with_entropy: bool = False,
    max_tokens_per_row: int | Literal["auto"] | None = "auto",
    checkpoint_chunks: bool | None = None,
) -> LogprobOutput:
    """log π(a_t | s_t) (and entropy) of every response token, as (B, T) float32 tensors.

    ``model`` is a transformers causal LM (or a PEFT-wrapped one). ``temperature`` must match
    the sampling temperature for the logprobs to be those of the sampling distribution.
    ``max_tokens_per_row`` splits a packed batch into rows of at most that many tokens; ``auto``
    chooses by attention kernel (``auto_row_tokens``), None = one row. ``checkpoint_chunks``:
    None = when autograd is on and there is more than one chunk (see the module docstring).
    """
    check_pairs(prompt_ids, response_ids)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs (got {temperature}); greedy has no density")
    trunk, head, softcap = causal_lm_parts(model)
    device = head.weight.device
    lengths = [len(r) for r in response_ids]
    mask = response_mask(response_ids, device=device)
    if sum(lengths) == 0:
        zeros = mask.clone()
        return LogprobOutput(zeros, zeros.clone() if with_entropy else None, mask)
    # The last response token is never an input: nothing after it is predicted.
    sequences = [p + r[:-1] for p, r in zip(prompt_ids, response_ids, strict=True)]
    positions = [torch.arange(len(p) - 1, len(p) - 1 + len(r)) for p, r in zip(prompt_ids, response_ids, strict=True)]
    pad_id = getattr(unwrap_model(model).config, "pad_token_id", None) or 0
    if max_tokens_per_row == "auto":
        max_tokens_per_row = auto_row_tokens(model, [len(s) for s in sequences])
    hidden = hidden_states_at(trunk, sequences, positions, packed=packed,
                              max_tokens_per_row=max_tokens_per_row, pad_id=pad_id)
    targets = torch.tensor([t for r in response_ids for t in r], dtype=torch.long, device=device)
    n_chunks = -(-hidden.shape[0] // chunk_size)
    if checkpoint_chunks is None:
        checkpoint_chunks = torch.is_grad_enabled() and n_chunks > 1
    logps, ents = [], []
    for start in range(0, hidden.shape[0], chunk_size):
        h, y = hidden[start:start + chunk_size], targets[start:start + chunk_size]
        if checkpoint_chunks:
            lp, ent = checkpoint(_head_chunk, h, y, head, temperature, softcap, with_entropy, use_reentrant=False)
        else:
            lp, ent = _head_chunk(h, y, head, temperature, softcap, with_entropy)
        logps.append(lp)
        ents.append(ent)
    logprobs = pad_ragged(torch.cat(logps), lengths)
    entropy = pad_ragged(torch.cat(ents), lengths) if with_entropy else None
    return LogprobOutput(logprobs, entropy, mask)

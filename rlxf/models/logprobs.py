"""Per-token log-probs, entropies and values of responses given their prompts.

This is the trainer's hot path (policy, old policy, reference, critic). For sequence i with
prompt p_i (P_i ids) and response a_i (R_i ids), row i of every (B, T) output holds, for
t < R_i,

    logprobs[i, t] = log softmax(z_t / temperature)[a_t]        z_t = logits at position P_i - 1 + t
    entropy[i, t]  = -sum_v softmax(z_t / temperature)_v * log softmax(z_t / temperature)_v
    values[i, t]   = V(s_t), the value head read at the same position (the state before a_t)

and 0 for t >= R_i (T = the longest response). What keeps it cheap:

* **Packing.** All sequences of a micro-batch are concatenated into one row with position ids
  restarting at 0 per sequence; transformers derives a block-diagonal causal mask from the
  position ids (``masking_utils.find_packed_sequence_indices``; flash-attention uses the same
  position ids), so attention never crosses a sequence border and no compute goes to padding.
  ``packed=False`` runs the right-padded batch instead (the reference the tests compare with).
  Not every architecture does this: OPT takes its learned positions from the attention mask,
  Bloom and MPT build their ALiBi mask from it, so packed sequences would see each other. A
  probe (``packing_isolates``) checks each trunk once (again when its attention implementation,
  dtype or device changes) and turns packing off where it fails.
* **Only response positions reach the head.** The trunk's hidden states are gathered at the
  positions that predict response tokens before the (tokens x vocab) output projection.
* **Chunks.** The head + log-softmax run on ``chunk_size`` positions at a time, so the logits
  of the whole batch never exist at once. With autograd on, each chunk is checkpointed: only
  its (chunk x hidden) input is kept for the backward pass, where its logits are recomputed.
  That costs one extra head matmul per chunk in the backward pass (the head's forward is a
  third of its forward+backward), and cuts what is held for the backward pass from the fp32
  softmax of every response token to their (tokens x hidden) inputs (checked in
  ``tests/unit/models/test_logprobs.py``). A single chunk is not checkpointed: nothing else
  would be computed while its logits are held.
* **One pass for log-prob and entropy** (``TokenLogprobEntropy``): both come from one softmax,
  and the backward pass is written out (onehot - p; -p (log p + H)), so autograd builds no
  graph through vocabulary-wide intermediates and an entropy used only as a metric costs no
  backward work. Tiny preset, 64 x 128 tokens, 2 threads: 12% off the training forward+backward.
* **Shared prompts.** The samples of a group (GRPO's n responses to one prompt) share their
  prompt. When that saves tokens, each distinct prompt runs through the trunk once, and every
  response then runs with its prompt's keys and values as the attention cache (gathered per
  sequence, so gradients from all n responses flow back into the one prompt forward) -- the
  prefix sharing the rollout engine does, in the training forward. Responses are right-padded
  to the longest one, so ``auto`` picks this path only when it runs fewer trunk tokens than
  packing: distinct prompts x longest prompt + sequences x longest response (inputs) against
  the sum of all sequence lengths. 8 samples of 16-token prompts with 32-token responses: 2112
  against 3008 tokens. A probe (``prompt_sharing_matches``) checks each trunk once against the
  padded path (MPT's ALiBi counts a shorter prompt's padding columns as distance) and turns
  sharing off where it fails.
"""

from __future__ import annotations

import inspect
import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from rlxf.models.loading import unwrap_model

log = logging.getLogger("rlxf")


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


def padding_id(trunk: torch.nn.Module) -> int:
    """A token id to fill padding with: the config's pad token when the embedding has a row for
    it, else 0. Padding is never attended to by a real token, so any row does; some configs
    (early LLaMA conversions) say ``pad_token_id: -1``, which would fail the embedding lookup."""
    pad = getattr(getattr(unwrap_model(trunk), "config", None), "pad_token_id", None)
    rows = getattr(trunk.get_input_embeddings(), "num_embeddings", None)
    return pad if isinstance(pad, int) and 0 <= pad and (rows is None or pad < rows) else 0


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
    order of i then position. Works under no_grad and with autograd. ``packed`` runs padded
    where ``packing_isolates`` says the trunk cannot pack.
    """
    device = next(trunk.parameters()).device
    lengths = [len(s) for s in sequences]
    if packed and not packing_isolates(trunk):
        packed = False
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
        hidden = _packed_forward(trunk, ids.to(device), pos.to(device))
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


def _checkpointed_layers(trunk: torch.nn.Module) -> bool:
    """Whether transformers' activation checkpointing would drop the cache in this forward."""
    return trunk.training and torch.is_grad_enabled() and any(
        getattr(m, "gradient_checkpointing", False) is True for m in trunk.modules())


def _empty_prompt_cache(trunk: torch.nn.Module):
    """A transformers 5 ``DynamicCache`` for the trunk when every layer keeps full keys/values
    (no sliding window) and its forward takes ``cache=``; else None."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:
        return None
    config = getattr(trunk, "config", None)
    if config is None or "cache" not in inspect.signature(trunk.forward).parameters:
        return None
    cache = DynamicCache(config=config)
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    return cache


def can_share_prompts(trunk: torch.nn.Module) -> bool:
    """Whether ``shared_prompt_hidden`` can run on this trunk: full-attention layers with a
    transformers 5 KV cache, and no activation checkpointing (which turns the cache off)."""
    return not _checkpointed_layers(trunk) and _empty_prompt_cache(trunk) is not None


def shared_prompt_tokens(prompt_ids: list[list[int]], response_ids: list[list[int]]) -> tuple[int, int]:
    """Trunk input tokens (shared-prompt path, packed path) for these sequences (see module doc)."""
    live = [i for i, r in enumerate(response_ids) if r]
    distinct = {tuple(prompt_ids[i]) for i in live}
    p_max = max((len(p) for p in distinct), default=0)
    r_max = max((len(response_ids[i]) - 1 for i in live), default=0)
    shared = len(distinct) * p_max + (len(live) * r_max if r_max else 0)
    packed = sum(len(prompt_ids[i]) + len(response_ids[i]) - 1 for i in live)
    return shared, packed


def wants_shared_prompts(trunk: torch.nn.Module, prompt_ids: list[list[int]], response_ids: list[list[int]]) -> bool:
    """``share_prompts='auto'``'s choice: sharing runs fewer trunk tokens than packing, and the
    trunk can share. (Under FSDP the ranks must choose alike: ``rlxf.trainer.roles``.)"""
    shared_tokens, packed_tokens = shared_prompt_tokens(prompt_ids, response_ids)
    return shared_tokens < packed_tokens and can_share_prompts(trunk)


def shared_prompt_hidden(trunk: torch.nn.Module, prompt_ids: list[list[int]], response_ids: list[list[int]],
                         pad_id: int = 0) -> torch.Tensor:
    """Last hidden states at the positions that predict each response token, (sum_i R_i, H), in
    order of i then t (as ``hidden_states_at``), with each distinct prompt run once.

    1. The U distinct prompts, right-padded to P = the longest (U, P): no mask needed, padding
       sits after every real token. Their keys/values become the cache.
    2. The cache is gathered to the B sequences with a response (index_select: differentiable,
       so every response's gradient reaches its prompt's single forward).
    3. The response inputs r[:-1], right-padded (B, W), positions P_i + t, attending to the
       cache with a mask that hides each prompt's padding columns [P_i, P).
    Response token 0 is predicted from step 1's last prompt position, token t >= 1 from step 3.
    """
    cache = _empty_prompt_cache(trunk)
    if cache is None or _checkpointed_layers(trunk):
        raise ValueError(
            f"{type(trunk).__name__} cannot share prompts: it needs full-attention layers with a transformers 5 "
            f"KV cache and no activation checkpointing; pass share_prompts=False (or 'auto')"
        )
    device = next(trunk.parameters()).device
    live = [i for i, r in enumerate(response_ids) if r]
    slot_of: dict[tuple[int, ...], int] = {}
    slots = torch.tensor([slot_of.setdefault(tuple(prompt_ids[i]), len(slot_of)) for i in live])
    prompts = list(slot_of)
    p_len = torch.tensor([len(p) for p in prompts])
    p_max = int(p_len.max())
    ids = torch.full((len(prompts), p_max), pad_id, dtype=torch.long)
    for u, p in enumerate(prompts):
        ids[u, :len(p)] = torch.tensor(p)
    hidden = trunk(input_ids=ids.to(device), cache=cache, use_cache=True).last_hidden_state
    hidden = hidden.reshape(-1, hidden.shape[-1])                       # (U*P, H)
    seq_p_len = p_len[slots]
    r_len = torch.tensor([len(response_ids[i]) - 1 for i in live])      # response inputs r[:-1]
    width = int(r_len.max())
    if width:
        sel = slots.to(device)
        for layer in cache.layers:
            layer.keys = layer.keys.index_select(0, sel)
            layer.values = layer.values.index_select(0, sel)
        r_ids = torch.full((len(live), width), pad_id, dtype=torch.long)
        for b, i in enumerate(live):
            r_ids[b, :r_len[b]] = torch.tensor(response_ids[i][:-1])
        positions = seq_p_len[:, None] + torch.arange(width)[None, :]
        mask = torch.ones((len(live), p_max + width), dtype=torch.long)
        mask[:, :p_max] = (torch.arange(p_max)[None, :] < seq_p_len[:, None]).long()
        out = trunk(input_ids=r_ids.to(device), position_ids=positions.to(device), attention_mask=mask.to(device),
                    cache=cache, use_cache=True).last_hidden_state
        hidden = torch.cat((hidden, out.reshape(-1, hidden.shape[-1])))  # (U*P + B*W, H)
    # row of `hidden` for response token t of live sequence b: the last prompt position for
    # t = 0, else position t - 1 of its response row
    n_tok = r_len + 1
    seq = torch.repeat_interleave(torch.arange(len(live)), n_tok)
    t = torch.arange(int(n_tok.sum())) - torch.repeat_interleave(torch.cumsum(n_tok, 0) - n_tok, n_tok)
    index = torch.where(t == 0, (slots * p_max + seq_p_len - 1)[seq], len(prompts) * p_max + seq * width + t - 1)
    return hidden.index_select(0, index.to(device))


def _packed_forward(trunk: torch.nn.Module, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """(rows, width, H) last hidden states of packed rows: position ids restart per sequence, no mask."""
    return trunk(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False).last_hidden_state


@dataclass
class FastPaths:
    """What the probes found on one trunk: whether packing and prompt sharing give the padded
    path's hidden states (None: not probed yet). Kept on the trunk object itself, so each probe
    runs once per model and goes away with it; ``key`` is what the answers were found under."""

    packed: bool | None = None
    shared: bool | None = None
    lm_forward: bool | None = None   # whether the causal LM's forward reads the trunk (``forward_uses_trunk``)
    key: tuple = ()


_FAST_PATHS_ATTR = "_rlxf_fast_paths"


def _forward_key(trunk: torch.nn.Module) -> tuple:
    """What the probes' answers depend on besides the architecture: the attention implementation
    of the trunk's config and its sub-configs (``set_attn_implementation`` changes it; a kernel
    that takes no mask from transformers lets packed sequences see each other), and the dtype and
    device the trunk computes in (the probes' tolerance)."""
    config = getattr(trunk, "config", None)
    configs = [config] + [getattr(config, name, None) for name in getattr(config, "sub_configs", None) or ()]
    impls = tuple(str(getattr(c, "_attn_implementation", None)) for c in configs if c is not None)
    param = next(trunk.parameters(), None)
    return impls, None if param is None else (param.dtype, param.device.type)


def fast_paths(trunk: torch.nn.Module) -> FastPaths:
    """The trunk's ``FastPaths`` record for how it computes now: created empty on first use, and
    again when its ``_forward_key`` changed since the probes ran."""
    key = _forward_key(trunk)
    state = vars(trunk).get(_FAST_PATHS_ATTR)
    if state is None or state.key != key:
        state = FastPaths(key=key)
        setattr(trunk, _FAST_PATHS_ATTR, state)
    return state


def _probe_tolerance(h: torch.Tensor) -> float:
    """Largest per-token ||h' - h|| / ||h|| two correct runs in a different arithmetic order reach:
    ~1e-7 in fp32, up to ~1e-2 in bf16 (ALiBi biases at shifted positions, 8 layers), and fp32
    matmuls in TF32 round like fp16. Broken trunks differ by 1e-2 (random-init Bloom) to 1 (OPT,
    MPT); a false alarm only costs speed."""
    tf32 = h.device.type == "cuda" and torch.get_float32_matmul_precision() != "highest"
    return 1e-4 if h.dtype.itemsize >= 4 and not tf32 else 0.1


def _mismatch(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest per-token ||got_t - want_t|| / ||want_t|| of (N, H) hidden states; inf if not finite."""
    got, want = got.float(), want.float()
    err = ((got - want).norm(dim=-1) / want.norm(dim=-1).clamp_min(torch.finfo(torch.float32).tiny)).max()
    return err.item() if torch.isfinite(err) else math.inf


def _probe_ids(trunk: torch.nn.Module, lengths: list[int]) -> list[list[int]]:
    """Token ids from a fixed seed within the trunk's vocabulary (the global RNG is not touched)."""
    vocab = trunk.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(3 if vocab > 3 else 0, vocab, (n,), generator=gen).tolist() for n in lengths]


@contextmanager
def _probing(trunk: torch.nn.Module):
    """No autograd and no dropout: a probe asks about the architecture, and its answer is kept
    for every later forward in either mode. Every module's mode is put back."""
    modes = [(m, m.training) for m in trunk.modules()]
    trunk.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, training in modes:
            m.training = training


def _turned_off(trunk: torch.nn.Module, path: str, why: str, err: float) -> None:
    log.warning("%s: %s (a probe's hidden states differ by %.2g of their norm); %s is off for this model, "
                "and the padded path gives the exact numbers", type(unwrap_model(trunk)).__name__, why, err, path)


def packing_isolates(trunk: torch.nn.Module) -> bool:
    """Whether packed rows keep their sequences apart on this trunk, probed once per trunk object.
    One forward of the rows [a, b], [b, a], [c, a] with |b| = |c|:

    * a after b and a after c sit at the same columns with the same position ids, so with the
      sequences apart they are computed alike, to the bit: a difference is attention crossing
      the border (Bloom and MPT build their ALiBi mask from the attention mask, not positions);
    * a (and b) at the start of a row and after the other differ only by rounding: a difference
      is positions that do not restart (OPT's learned positions come from the attention mask).
    """
    state = fast_paths(trunk)
    if state.packed is None:
        a, b, c = _probe_ids(trunk, [5, 7, 7])
        n = len(a)
        device = next(trunk.parameters()).device
        ids = torch.tensor([a + b, b + a, c + a], device=device)
        pa, pb = list(range(len(a))), list(range(len(b)))
        pos = torch.tensor([pa + pb, pb + pa, pb + pa], device=device)
        with _probing(trunk):
            h = _packed_forward(trunk, ids, pos)
        tol = _probe_tolerance(h)
        leak = _mismatch(h[2, -n:], h[1, -n:])
        shift = max(_mismatch(h[1, -n:], h[0, :n]), _mismatch(h[0, n:], h[1, :-n]))
        state.packed = leak <= tol / 20 and shift <= tol
        if not state.packed:
            _turned_off(trunk, "packing", "packed sequences see each other's tokens or positions",
                        max(leak, shift))
    return state.packed


def prompt_sharing_matches(trunk: torch.nn.Module, pad_id: int = 0) -> bool:
    """Whether ``shared_prompt_hidden`` gives the padded path's hidden states on this trunk, probed
    once per trunk object (False where it cannot share at all): prompts of 2 and 12 tokens, the
    longer one shared by two 4-token responses. The short prompt's padding columns must be
    masked and not counted as distance (MPT's ALiBi counts them)."""
    state = fast_paths(trunk)
    if state.shared is None:
        if _empty_prompt_cache(trunk) is None:
            return False
        short, long_, r1, r2 = _probe_ids(trunk, [2, 12, 4, 4])
        prompts, responses = [short, long_, long_], [r1, r2, r1]
        sequences, positions = trunk_inputs(prompts, responses)
        with _probing(trunk):
            want = hidden_states_at(trunk, sequences, positions, packed=False, pad_id=pad_id)
            got = shared_prompt_hidden(trunk, prompts, responses, pad_id=pad_id)
        err = _mismatch(got, want)
        state.shared = err <= _probe_tolerance(want)
        if not state.shared:
            _turned_off(trunk, "prompt sharing", "a response does not see its padded prompt as the padded "
                        "batch does", err)
    return state.shared


class TokenLogprobEntropy(torch.autograd.Function):
    """log p(y) and H(p) of each row of logits z (N, V), p = softmax(z), in a few passes over z.

    Forward: m = max z, e = exp(z - m), s = sum e, log Z = m + log s, p = e / s,
    log p(y) = z_y - log Z, H = log Z - sum_v p_v z_v. Only p (and H) are kept for backward, where

        d log p(y) / dz = onehot(y) - p          d H / dz = -p (log p + H)

    (the second from H = -sum p log p), so a loss without an entropy term costs one pass over
    p, and autograd never builds the softmax / product graph of the plain formulas.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
        ctx.set_materialize_grads(False)
        m = logits.amax(-1, keepdim=True)
        p = torch.sub(logits, m).exp_()
        s = p.sum(-1, keepdim=True)
        logz = m + s.log()
        p.div_(s)
        logp = logits.gather(-1, targets[:, None]) - logz
        entropy = None
        if with_entropy:
            entropy = (logz - torch.bmm(p.unsqueeze(1), logits.unsqueeze(2)).squeeze(-1)).squeeze(-1)
        ctx.save_for_backward(p, targets, entropy)
        return logp.squeeze(-1), entropy

    @staticmethod
    def backward(ctx, g_logp, g_entropy):
        p, targets, entropy = ctx.saved_tensors
        grad = None
        if g_logp is not None:
            grad = p * -g_logp[:, None]
            grad.scatter_add_(-1, targets[:, None], g_logp[:, None])
        if g_entropy is not None and entropy is not None:
            g_h = -(torch.special.xlogy(p, p) + p * entropy[:, None]) * g_entropy[:, None]
            grad = g_h if grad is None else grad.add_(g_h)
        return grad, None, None


class _TrunkOutput:
    """What a trunk's forward returns, holding only given hidden states: every other field
    (cache, attentions, router logits) reads as None, as when it was not asked for."""

    def __init__(self, hidden: torch.Tensor):
        self.last_hidden_state = hidden

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return None

    def __getitem__(self, index):
        return (self.last_hidden_state,)[index]


@contextmanager
def _trunk_returning(trunk: torch.nn.Module, hidden: torch.Tensor):
    """Within: ``trunk``'s forward returns ``hidden`` (N, H) as its last hidden state, a batch of
    one. Yields a list with one entry per call."""
    calls: list[int] = []
    saved = trunk.__dict__.get("forward")  # an instance-level forward (accelerate's hooks) is put back

    def forward(*args, **kwargs):
        calls.append(1)
        return _TrunkOutput(hidden[None])

    trunk.forward = forward
    try:
        yield calls
    finally:
        if saved is None:
            del trunk.forward
        else:
            trunk.forward = saved


def lm_logits(lm: torch.nn.Module, trunk: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """(N, V) logits of trunk outputs ``hidden`` (N, H), by the causal LM's own forward with its
    trunk's forward replaced by ``hidden`` (check ``forward_uses_trunk`` first).

    What an architecture does between its trunk and its logits differs, and a config field's
    name does not say what: Cohere multiplies by ``logit_scale``, Granite divides by
    ``logits_scaling`` and HyperCLOVA X multiplies by it, MiniCPM3 scales the hidden states
    before the head, Gemma-2 soft-caps, Chameleon masks image tokens. Running the model's own
    code keeps these log-probs those of the model that samples (the engines' forward).
    """
    with _trunk_returning(trunk, hidden):
        ids = torch.zeros((1, hidden.shape[0]), dtype=torch.long, device=hidden.device)
        return lm(input_ids=ids, use_cache=False).logits[0]


def forward_uses_trunk(lm: torch.nn.Module, trunk: torch.nn.Module, head: torch.nn.Module) -> bool:
    """Whether ``lm``'s forward gets its hidden states from ``trunk``'s forward, so that
    ``lm_logits`` applies; OPT's calls ``trunk.decoder`` instead (and only applies its head).
    One token through the head finds out, once per trunk (``FastPaths``)."""
    state = fast_paths(trunk)
    if state.lm_forward is None:
        probe = torch.zeros((1, head.weight.shape[-1]), dtype=head.weight.dtype, device=head.weight.device)
        with torch.no_grad(), _trunk_returning(trunk, probe) as calls:
            lm(input_ids=torch.zeros((1, 1), dtype=torch.long, device=probe.device), use_cache=False)
        state.lm_forward = bool(calls)
    return state.lm_forward


def _head_chunk(hidden: torch.Tensor, targets: torch.Tensor, to_logits, temperature: float,
                with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    logits = to_logits(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    logp, entropy = TokenLogprobEntropy.apply(logits, targets, with_entropy)
    return logp, entropy if with_entropy else logp.new_zeros(())


def causal_lm_parts(model) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module]:
    """(decoder trunk, output head, causal LM) of a transformers causal LM or a PEFT wrapper;
    the causal LM is the transformers model inside the wrapper."""
    base = unwrap_model(model)
    trunk = getattr(base, base.base_model_prefix, None)
    head = base.get_output_embeddings()
    if trunk is None or head is None:
        raise TypeError(
            f"{type(base).__name__} is not a causal LM with a `{base.base_model_prefix}` trunk and an "
            f"output embedding; sequence_logprobs needs a *ForCausalLM model"
        )
    return trunk, head, base


def trunk_inputs(prompt_ids: list[list[int]],
                 response_ids: list[list[int]]) -> tuple[list[list[int]], list[torch.Tensor]]:
    """(sequences, positions) for ``hidden_states_at``: prompt + response without its last token
    (nothing after it is predicted), and the positions P_i - 1 + t that predict response token t."""
    sequences = [p + r[:-1] for p, r in zip(prompt_ids, response_ids, strict=True)]
    positions = [torch.arange(len(p) - 1, len(p) - 1 + len(r)) for p, r in zip(prompt_ids, response_ids, strict=True)]
    return sequences, positions


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
    share_prompts: bool | Literal["auto"] = "auto",
) -> LogprobOutput:
    """log π(a_t | s_t) (and entropy) of every response token, as (B, T) float32 tensors.

    ``model`` is a transformers causal LM (or a PEFT-wrapped one). ``temperature`` must match
    the sampling temperature for the logprobs to be those of the sampling distribution.
    ``max_tokens_per_row`` splits a packed batch into rows of at most that many tokens; ``auto``
    chooses by attention kernel (``auto_row_tokens``), None = one row. ``checkpoint_chunks``:
    None = when autograd is on and there is more than one chunk (see the module docstring).
    ``share_prompts`` (with ``packed``): run each distinct prompt once (``shared_prompt_hidden``);
    ``auto`` = when that runs fewer trunk tokens than packing and the trunk allows it. Either
    fast path is used only where the trunk's probe finds it gives the padded path's numbers.
    """
    check_pairs(prompt_ids, response_ids)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs (got {temperature}); greedy has no density")
    trunk, head, lm = causal_lm_parts(model)
    device = head.weight.device
    lengths = [len(r) for r in response_ids]
    mask = response_mask(response_ids, device=device)
    if sum(lengths) == 0:
        zeros = mask.clone()
        return LogprobOutput(zeros, zeros.clone() if with_entropy else None, mask)
    sequences, positions = trunk_inputs(prompt_ids, response_ids)
    pad_id = padding_id(trunk)
    if share_prompts == "auto":
        share_prompts = wants_shared_prompts(trunk, prompt_ids, response_ids)
    # (share_prompts=True on a trunk that cannot share at all: shared_prompt_hidden says why)
    if packed and share_prompts and can_share_prompts(trunk) and not prompt_sharing_matches(trunk, pad_id):
        share_prompts = False
    if packed and share_prompts:
        hidden = shared_prompt_hidden(trunk, prompt_ids, response_ids, pad_id=pad_id)
    else:
        if max_tokens_per_row == "auto":
            max_tokens_per_row = auto_row_tokens(model, [len(s) for s in sequences])
        hidden = hidden_states_at(trunk, sequences, positions, packed=packed,
                                  max_tokens_per_row=max_tokens_per_row, pad_id=pad_id)
    targets = torch.tensor([t for r in response_ids for t in r], dtype=torch.long, device=device)
    to_logits = partial(lm_logits, lm, trunk) if forward_uses_trunk(lm, trunk, head) else head
    n_chunks = -(-hidden.shape[0] // chunk_size)
    if checkpoint_chunks is None:
        checkpoint_chunks = torch.is_grad_enabled() and n_chunks > 1
    logps, ents = [], []
    for start in range(0, hidden.shape[0], chunk_size):
        h, y = hidden[start:start + chunk_size], targets[start:start + chunk_size]
        if checkpoint_chunks:
            lp, ent = checkpoint(_head_chunk, h, y, to_logits, temperature, with_entropy, use_reentrant=False)
        else:
            lp, ent = _head_chunk(h, y, to_logits, temperature, with_entropy)
        logps.append(lp)
        ents.append(ent)
    logprobs = pad_ragged(torch.cat(logps), lengths)
    entropy = pad_ragged(torch.cat(ents), lengths) if with_entropy else None
    return LogprobOutput(logprobs, entropy, mask)

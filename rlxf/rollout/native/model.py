"""The native engine's own copy of a Llama / Qwen2 decoder, laid out for batched decoding.

Weights are re-laid out once: q, k and v projections fused into one (N_qkv, H) matrix per layer,
gate and up into one (2I, H) matrix, and within each q/k head the rows reordered from
transformers' half-split rotary layout (x_0..x_{D/2-1}, x_{D/2}..x_{D-1}) to interleaved pairs
(x_0, x_{D/2}, x_1, x_{D/2+1}, ...), so that the rotary embedding is one complex multiply.
Attention scores are dot products over a head, which do not change when q and k are permuted
alike. Every Hugging Face parameter name maps to a (strided) view of these tensors, so
``load_`` (used by ``update_weights``) is one ``copy_`` per parameter and nothing else.

The forward code is plain torch (plus the matmul kernels of ``kernels.py``), written for the
shapes of decoding: one new token per live sequence, the prompt's keys/values shared by all
samples of a group (see ``attention``).

Notation: B live sequences, G live prompts (prefix slots), n samples per prompt, H hidden size,
Hq query heads, Hkv key/value heads, r = Hq / Hkv, D head dim, P prompt width, W generated width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from rlxf.rollout.native.kernels import TorchKernels

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
_IGNORED_NAME_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.original_inv_freq")


class UnsupportedModel(ValueError):
    """The native engine cannot run this model (the reason says why); the HF engine can."""


@dataclass(frozen=True)
class ModelSpec:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float
    context_window: int
    tied: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads

    def param_count(self) -> int:
        """Parameters of the model (the tied embedding counts once)."""
        h, i, qkv = self.hidden_size, self.intermediate_size, self.q_dim + 2 * self.kv_dim
        layer = h * qkv + self.q_dim * h + 3 * h * i + 2 * h
        layer += qkv * self.qkv_bias + h * self.o_bias + (2 * i + h) * self.mlp_bias
        head = 0 if self.tied else self.vocab_size * h
        return self.vocab_size * h + head + self.num_layers * layer + h


def model_spec(model, max_model_len: int | None = None) -> ModelSpec:
    """The architecture numbers of a transformers Llama/Qwen2 causal LM; UnsupportedModel otherwise.
    ``max_model_len``: the engine's context limit, when it is below ``max_position_embeddings``
    (a sliding window no sequence of that length reaches is full attention)."""
    cfg = model.config
    mt = getattr(cfg, "model_type", None)
    if mt not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModel(f"model_type {mt!r} is not one of the native engine's {SUPPORTED_MODEL_TYPES}")
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise UnsupportedModel(f"hidden_act {cfg.hidden_act!r} (the native engine implements silu)")
    why = _not_full_attention(cfg, max_model_len)
    if why is not None:
        raise UnsupportedModel(f"{why}; the native engine implements full attention only")
    rope = getattr(cfg, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        raise UnsupportedModel(f"rope_type {rope_type!r} (the native engine implements {STATIC_ROPE_TYPES})")
    if getattr(cfg, "pretraining_tp", 1) not in (1, None):
        raise UnsupportedModel("pretraining_tp > 1")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    if mt == "qwen2":
        qkv_bias, o_bias, mlp_bias = True, False, False
    else:
        qkv_bias = o_bias = bool(getattr(cfg, "attention_bias", False))
        mlp_bias = bool(getattr(cfg, "mlp_bias", False))
    return ModelSpec(
        model_type=mt, vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        num_layers=cfg.num_hidden_layers, num_heads=cfg.num_attention_heads, num_kv_heads=kv_heads,
        head_dim=head_dim, intermediate_size=cfg.intermediate_size, rms_eps=cfg.rms_norm_eps,
        context_window=cfg.max_position_embeddings, tied=tied,
        qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias,
    )


def _layer_types(cfg) -> list[str]:
    """Each layer's attention kind, as transformers builds the model from ``cfg``.

    ``layer_types`` when the config has it; else Qwen2's rule: layer i slides when
    ``use_sliding_window`` is set, ``sliding_window`` is not None and i >= ``max_window_layers``.
    """
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types:
        return list(layer_types)
    window = getattr(cfg, "sliding_window", None) if getattr(cfg, "use_sliding_window", False) else None
    first = getattr(cfg, "max_window_layers", 0) or 0
    return ["sliding_attention" if window is not None and i >= first else "full_attention"
            for i in range(cfg.num_hidden_layers)]


def _not_full_attention(cfg, max_model_len: int | None = None) -> str | None:
    """Why some layer's attention differs from full causal attention on a sequence the engine can
    hold, or None when none does.

    A sliding layer of window w lets query position q see keys k > q - w; with every position
    below the context C = min(``max_position_embeddings``, ``max_model_len``) <= w that is every
    earlier key, i.e. full attention.
    """
    window = getattr(cfg, "sliding_window", None)
    context = getattr(cfg, "max_position_embeddings", None)
    if max_model_len is not None:
        context = max_model_len if context is None else min(context, max_model_len)
    limit = "max_position_embeddings" if context == getattr(cfg, "max_position_embeddings", None) else "max_model_len"
    kinds = _layer_types(cfg)
    sliding = [i for i, k in enumerate(kinds) if k == "sliding_attention"
               and not (window is not None and context is not None and window >= context)]
    other = [i for i, k in enumerate(kinds) if k not in ("full_attention", "sliding_attention")]
    if other:
        return f"layers {other} use {sorted({kinds[i] for i in other})} attention"
    if sliding:
        return (f"layers {sliding} use sliding-window attention (sliding_window {window} < {limit} "
                f"{context}; use_sliding_window and max_window_layers decide which layers slide)")
    return None


def rope_tables(model, spec: ModelSpec, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (length, D/2) float32: rotary tables for positions 0..length-1.

    Computed as transformers computes them (float32 positions times the model's inv_freq
    buffer, then the attention scaling), so the rotated q/k match its values.
    """
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if rotary is None or not hasattr(rotary, "inv_freq"):
        raise UnsupportedModel("no rotary_emb.inv_freq buffer on the model")
    inv_freq = rotary.inv_freq.detach().to(device=device, dtype=torch.float32)
    scaling = float(getattr(rotary, "attention_scaling", 1.0))
    pos = torch.arange(length, device=device, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]
    return freqs.cos() * scaling, freqs.sin() * scaling


def rotate_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rot: torch.Tensor | None = None) -> None:
    """Rotary embedding, in place, of x (..., heads, D) in the interleaved layout.

    ``cos``/``sin`` (..., 1, D/2) broadcast over heads. Pair (a, b) = (x_2i, x_2i+1) becomes
    (a cos - b sin, a sin + b cos): one complex multiply for float32 (by ``rot`` = cos + i sin
    when the caller has built it once for all layers), real arithmetic otherwise.
    """
    if x.dtype == torch.float32:
        z = torch.view_as_complex(x.unflatten(-1, (-1, 2)))
        z.mul_(torch.complex(cos, sin) if rot is None else rot)
        return
    pairs = x.unflatten(-1, (-1, 2))
    a, b = pairs[..., 0].clone(), pairs[..., 1].clone()
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    pairs[..., 0] = a * c - b * s
    pairs[..., 1] = a * s + b * c


@dataclass
class LayerWeights:
    ln1: torch.Tensor                 # (H,)
    wqkv: torch.Tensor                # (Hq*D + 2*Hkv*D, H): q, k, v rows stacked
    bqkv: torch.Tensor | None         # (Hq*D + 2*Hkv*D,)
    wo: torch.Tensor                  # (H, Hq*D)
    bo: torch.Tensor | None
    ln2: torch.Tensor                 # (H,)
    wgu: torch.Tensor                 # (2I, H): gate rows, then up rows
    bgu: torch.Tensor | None
    wd: torch.Tensor                  # (H, I)
    bd: torch.Tensor | None


@dataclass
class NativeWeights:
    """The engine's weights; ``targets`` maps each HF parameter name to the view it is copied into."""

    spec: ModelSpec
    embed: torch.Tensor               # (V, H)
    layers: list[LayerWeights]
    norm: torch.Tensor                # (H,)
    lm_head: torch.Tensor             # (V, H); the same tensor as embed when tied
    targets: dict[str, torch.Tensor] = field(default_factory=dict)   # HF name -> (strided) view to copy into
    shapes: dict[str, torch.Size] = field(default_factory=dict)      # HF name -> the HF tensor's shape

    @classmethod
    def allocate(cls, spec: ModelSpec, device, dtype) -> NativeWeights:
        def empty(*shape):
            return torch.empty(*shape, device=device, dtype=dtype)

        h, i, q, kv, d = spec.hidden_size, spec.intermediate_size, spec.q_dim, spec.kv_dim, spec.head_dim

        def rotary_rows(rows: torch.Tensor, heads: int) -> torch.Tensor:
            # storage (heads, D/2, 2, ...) seen as transformers' (heads, 2, D/2, ...) half-split order
            return rows.view(heads, d // 2, 2, *rows.shape[1:]).transpose(1, 2)

        embed = empty(spec.vocab_size, h)
        lm_head = embed if spec.tied else empty(spec.vocab_size, h)
        targets = {"model.embed_tokens.weight": embed, "lm_head.weight": lm_head}
        layers = []
        for n in range(spec.num_layers):
            lw = LayerWeights(
                ln1=empty(h), wqkv=empty(q + 2 * kv, h), bqkv=empty(q + 2 * kv) if spec.qkv_bias else None,
                wo=empty(h, q), bo=empty(h) if spec.o_bias else None, ln2=empty(h),
                wgu=empty(2 * i, h), bgu=empty(2 * i) if spec.mlp_bias else None,
                wd=empty(h, i), bd=empty(h) if spec.mlp_bias else None,
            )
            p = f"model.layers.{n}."
            targets[p + "input_layernorm.weight"] = lw.ln1
            targets[p + "post_attention_layernorm.weight"] = lw.ln2
            parts = (("q_proj", slice(0, q), spec.num_heads), ("k_proj", slice(q, q + kv), spec.num_kv_heads),
                     ("v_proj", slice(q + kv, q + 2 * kv), 0))
            for name, rows, heads in parts:
                targets[p + f"self_attn.{name}.weight"] = rotary_rows(lw.wqkv[rows], heads) if heads else lw.wqkv[rows]
                if lw.bqkv is not None:
                    targets[p + f"self_attn.{name}.bias"] = rotary_rows(lw.bqkv[rows], heads) if heads else lw.bqkv[rows]
            targets[p + "self_attn.o_proj.weight"] = lw.wo
            if lw.bo is not None:
                targets[p + "self_attn.o_proj.bias"] = lw.bo
            targets[p + "mlp.gate_proj.weight"] = lw.wgu[:i]
            targets[p + "mlp.up_proj.weight"] = lw.wgu[i:]
            targets[p + "mlp.down_proj.weight"] = lw.wd
            if spec.mlp_bias:
                targets[p + "mlp.gate_proj.bias"] = lw.bgu[:i]
                targets[p + "mlp.up_proj.bias"] = lw.bgu[i:]
                targets[p + "mlp.down_proj.bias"] = lw.bd
            layers.append(lw)
        norm = empty(h)
        targets["model.norm.weight"] = norm
        shapes = {name: torch.Size((t.shape[0] * t.shape[1] * t.shape[2], *t.shape[3:])) if t.dim() >= 3 and "proj" in name
                  else t.shape for name, t in targets.items()}
        return cls(spec=spec, embed=embed, layers=layers, norm=norm, lm_head=lm_head, targets=targets, shapes=shapes)

    @staticmethod
    def normalize_name(name: str) -> str:
        """HF parameter name as the engine knows it (DDP / torch.compile / PEFT wrappers stripped)."""
        for prefix in ("module.", "_orig_mod.", "base_model.model."):
            while name.startswith(prefix):
                name = name[len(prefix):]
        return name

    @torch.no_grad()
    def load_(self, named_tensors, *, require_all: bool = False) -> int:
        """Copy ``(name, tensor)`` pairs into the engine's weights; return how many were copied.

        Unknown names are an error (they would silently leave stale weights behind), except the
        rotary frequency buffers the engine computes itself. ``require_all`` checks that every
        parameter of the model was given (used when the engine is built). Every name and shape
        is checked before the first copy: a refused update leaves the weights as they were, not
        half old and half new under the old version.
        """
        seen: set[str] = set()
        unknown: list[str] = []
        copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        for raw, tensor in named_tensors:
            name = self.normalize_name(raw)
            target = self.targets.get(name)
            if target is None:
                if not name.endswith(_IGNORED_NAME_SUFFIXES):
                    unknown.append(raw)
                continue
            if tensor.shape != self.shapes[name]:
                raise ValueError(f"update_weights: {raw} has shape {tuple(tensor.shape)}, the engine's copy "
                                 f"{tuple(self.shapes[name])}; is this the same model architecture?")
            copies.append((target, tensor))
            seen.add(name)
        if unknown:
            hint = (" LoRA adapter tensors cannot be copied one by one: pass "
                    "rlxf.models.merged_state_dict(model).items()") if any("lora_" in u for u in unknown) else ""
            raise KeyError(f"update_weights: {len(unknown)} names the engine does not know, e.g. "
                           f"{unknown[:5]}.{hint}")
        if require_all:
            missing = sorted(set(self.targets) - seen - ({"lm_head.weight"} if self.spec.tied else set()))
            if self.spec.tied and "lm_head.weight" not in seen and "model.embed_tokens.weight" not in seen:
                missing.append("model.embed_tokens.weight")
            if missing:
                raise KeyError(f"the model's weights lack {len(missing)} tensors the engine needs, e.g. {missing[:5]}")
        for target, tensor in copies:
            target.copy_(tensor.detach().reshape(target.shape))
        return len(seen)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps), the statistics in float32 (as transformers does).

    float32: mean(x^2) comes from one norm reduction, (|x|^2 / H), then two in-place scalings:
    three passes over x instead of the four or five of the composite ``F.rms_norm`` (~5-10%
    of a CPU decode step).
    """
    if x.dtype == torch.float32:
        scale = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.shape[-1]).add_(eps).rsqrt_()
        return (x * scale).mul_(weight)
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


@torch.no_grad()
def prefill(w: NativeWeights, k: TorchKernels, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            write_kv) -> torch.Tensor:
    """Run right-padded prompts through the model; return the final-norm hidden states (G, P, H).

    ``k`` the matmul kernels; ``ids`` (G, P); ``cos``/``sin`` the (context, D/2) rotary tables.
    ``write_kv(layer, kv)`` receives each layer's rotated keys and values, (G, P, 2, Hkv, D).
    Causal attention alone is exact for every real token: padding sits after a prompt's last
    token, so no real query can see it.
    """
    s = w.spec
    g, p = ids.shape
    hq, hkv = s.num_heads, s.num_kv_heads
    x = w.embed[ids.reshape(-1)]                                   # (G*P, H)
    c, sn = cos[:p][None, :, None, :], sin[:p][None, :, None, :]   # (1, P, 1, D/2)
    rot = torch.complex(c, sn) if x.dtype == torch.float32 else None
    for layer, lw in enumerate(w.layers):
        qkv = k.linear(rms_norm(x, lw.ln1, s.rms_eps), lw.wqkv, lw.bqkv).view(g, p, hq + 2 * hkv, s.head_dim)
        rotate_(qkv[:, :, : hq + hkv], c, sn, rot)
        write_kv(layer, qkv[:, :, hq:].unflatten(2, (2, hkv)))
        q, key, v = (qkv[:, :, a:b].transpose(1, 2) for a, b in ((0, hq), (hq, hq + hkv), (hq + hkv, hq + 2 * hkv)))
        o = F.scaled_dot_product_attention(q, key, v, is_causal=True, enable_gqa=s.group > 1)
        x = k.linear_add(o.transpose(1, 2).reshape(g * p, s.q_dim), lw.wo, lw.bo, x)
        x = k.linear_add(k.gated(rms_norm(x, lw.ln2, s.rms_eps), lw.wgu, lw.bgu), lw.wd, lw.bd, x)
    return rms_norm(x, w.norm, s.rms_eps).view(g, p, s.hidden_size)


@dataclass
class DecodeBatch:
    """Per-step inputs and indices shared by all layers (built once per decode step by the engine).

    Row b of the batch is a sequence, sample ``member[b]`` (of n member places) of the prompt
    in slot ``prefix[b]``. Prompt keys/values live once per prompt slot; a sequence's own
    generated keys/values live in its row of the generated-token cache. Query rows are
    flattened as (B*Hq) = (b, kv head, r); "group rows" as (G*Hkv*n*r) = (g, kv head, j, r).
    """

    tokens: torch.Tensor       # (B,) long, the last sampled token of each sequence (its KV is not cached yet)
    cos: torch.Tensor          # (B, 1, D/2) rotary tables at each sequence's position
    sin: torch.Tensor          # (B, 1, D/2)
    write_at: torch.Tensor     # (B,) long, index in the generated cache where this token's KV goes
    gen_bias: torch.Tensor     # (B*Hkv, 1, W) 0 on generated positions <= write_at, -inf after
    prompt_bias: torch.Tensor  # (G*Hkv, 1, P) 0 on a prompt's positions, -inf on its padding
    to_group: torch.Tensor     # (G*Hkv*n*r,) long, the query row (B*Hq) of each group row (row 0 if no member)
    to_row: torch.Tensor       # (B*Hq,) long, the group row of each query row
    n: int                     # member places per prompt
    num_prompts: int           # G


def attention(q: torch.Tensor, prompt_k, prompt_v, gen_k, gen_v, d: DecodeBatch, scale: float, n_kv: int) -> torch.Tensor:
    """Decode attention of q (B, Hq, D) over each sequence's prompt and its generated tokens.

    Prompt part, shared: the queries of a prompt's n samples are gathered into one (n*r, D)
    block per (prompt, kv head) and multiplied with that prompt's keys once, so a prompt's
    keys/values are read once per step, not n times (prefix sharing; cf. "cascade" /
    shared-prefix attention). Generated part: each sequence against its own keys, (r, D)
    queries per kv head. One softmax over both parts' scores (concatenated per sequence), then
    each part's probabilities times its values. Returns (B, Hq*D).
    """
    b, hq, dim = q.shape
    r = hq // n_kv
    p = prompt_k.shape[1]
    rows = d.to_group.shape[0] // (d.num_prompts * n_kv)          # n * r
    q = q.reshape(b * hq, dim)
    q_grp = q.index_select(0, d.to_group).view(-1, rows, dim)
    s_p = torch.baddbmm(d.prompt_bias, q_grp, prompt_k.transpose(1, 2), alpha=scale)   # (G*Hkv, n*r, P)
    s_g = torch.baddbmm(d.gen_bias, q.view(b * n_kv, r, dim), gen_k.transpose(1, 2), alpha=scale)  # (B*Hkv, r, W)
    scores = torch.cat((s_p.view(-1, p).index_select(0, d.to_row).view(b * n_kv, r, p), s_g), dim=-1)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)   # (B*Hkv, r, P+W)
    out = torch.bmm(probs[..., p:], gen_v)                                     # (B*Hkv, r, D)
    p_grp = probs[..., :p].reshape(b * hq, p).index_select(0, d.to_group).view(-1, rows, p)
    o_p = torch.bmm(p_grp, prompt_v).view(-1, dim).index_select(0, d.to_row)  # (B*Hq, D)
    return out.view(b, hq * dim).add_(o_p.view(b, hq * dim))


@torch.no_grad()
def decode(w: NativeWeights, k: TorchKernels, d: DecodeBatch, cache) -> torch.Tensor:
    """One decoding step for every live sequence; returns the next-token logits (B, V) float32.

    ``cache`` provides ``prompt_kv(layer, G)`` -> (k, v) each (G*Hkv, P, D),
    ``gen_kv(layer, B)`` -> (k, v) each (B*Hkv, W, D), and ``write_gen(layer, kv, at)``.
    """
    s = w.spec
    b = d.tokens.shape[0]
    hq, hkv = s.num_heads, s.num_kv_heads
    scale = s.head_dim ** -0.5
    x = w.embed[d.tokens]                                           # (B, H)
    rot = torch.complex(d.cos, d.sin) if x.dtype == torch.float32 else None
    for layer, lw in enumerate(w.layers):
        qkv = k.linear(rms_norm(x, lw.ln1, s.rms_eps), lw.wqkv, lw.bqkv).view(b, hq + 2 * hkv, s.head_dim)
        rotate_(qkv[:, : hq + hkv], d.cos, d.sin, rot)
        cache.write_gen(layer, qkv[:, hq:].unflatten(1, (2, hkv)), d.write_at)
        pk, pv = cache.prompt_kv(layer, d.num_prompts)
        gk, gv = cache.gen_kv(layer, b)
        o = attention(qkv[:, :hq], pk, pv, gk, gv, d, scale, hkv)
        x = k.linear_add(o, lw.wo, lw.bo, x)
        x = k.linear_add(k.gated(rms_norm(x, lw.ln2, s.rms_eps), lw.wgu, lw.bgu), lw.wd, lw.bd, x)
    return logits_of(w, k, rms_norm(x, w.norm, s.rms_eps))


def logits_of(w: NativeWeights, k: TorchKernels, hidden: torch.Tensor) -> torch.Tensor:
    """(N, H) final-norm hidden states -> (N, V) float32 logits."""
    return k.linear(hidden, w.lm_head).float()

"""The native engine's own copy of a Llama / Qwen2 decoder, laid out for batched decoding.

Weights are re-laid out once: q, k and v projections fused into one (N_qkv, H) matrix per layer,
gate and up into one (2I, H) matrix. Every Hugging Face parameter name maps to a view of these
tensors, so ``load_`` (used by ``update_weights``) is one ``copy_`` per parameter and nothing
else. The forward code is plain torch, written for the shapes of decoding: one new token per
live sequence, the prompt's keys/values shared by all samples of a group (see ``attention``).

Notation: B live sequences, G live prompts (prefix slots), n samples per prompt, H hidden size,
Hq query heads, Hkv key/value heads, r = Hq / Hkv, D head dim, P prompt width, T generated width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

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


def model_spec(model) -> ModelSpec:
    """The architecture numbers of a transformers Llama/Qwen2 causal LM; UnsupportedModel otherwise."""
    cfg = model.config
    mt = getattr(cfg, "model_type", None)
    if mt not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModel(f"model_type {mt!r} is not one of the native engine's {SUPPORTED_MODEL_TYPES}")
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise UnsupportedModel(f"hidden_act {cfg.hidden_act!r} (the native engine implements silu)")
    layer_types = getattr(cfg, "layer_types", None) or []
    if getattr(cfg, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types):
        raise UnsupportedModel("sliding-window attention layers (the native engine implements full attention)")
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


def rope_tables(model, spec: ModelSpec, length: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin_rot), each (length, D): rotary tables for positions 0..length-1.

    ``sin_rot`` has its first half negated, so that ``rotate_half(x) * sin`` (transformers'
    form) equals ``x.roll(D/2, -1) * sin_rot``. Computed exactly as transformers computes them
    (float32 positions times the model's inv_freq buffer, then the attention scaling).
    """
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if rotary is None or not hasattr(rotary, "inv_freq"):
        raise UnsupportedModel("no rotary_emb.inv_freq buffer on the model")
    inv_freq = rotary.inv_freq.detach().to(device=device, dtype=torch.float32)
    scaling = float(getattr(rotary, "attention_scaling", 1.0))
    pos = torch.arange(length, device=device, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * scaling, emb.sin() * scaling
    half = spec.head_dim // 2
    sin_rot = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
    return cos.to(dtype), sin_rot.to(dtype)


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
    targets: dict[str, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def allocate(cls, spec: ModelSpec, device, dtype) -> NativeWeights:
        def empty(*shape):
            return torch.empty(*shape, device=device, dtype=dtype)

        h, i, q, kv = spec.hidden_size, spec.intermediate_size, spec.q_dim, spec.kv_dim
        embed = empty(spec.vocab_size, h)
        lm_head = embed if spec.tied else empty(spec.vocab_size, h)
        targets = {"model.embed_tokens.weight": embed, "model.norm.weight": None, "lm_head.weight": lm_head}
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
            for name, rows in (("q_proj", slice(0, q)), ("k_proj", slice(q, q + kv)), ("v_proj", slice(q + kv, q + 2 * kv))):
                targets[p + f"self_attn.{name}.weight"] = lw.wqkv[rows]
                if lw.bqkv is not None:
                    targets[p + f"self_attn.{name}.bias"] = lw.bqkv[rows]
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
        return cls(spec=spec, embed=embed, layers=layers, norm=norm, lm_head=lm_head, targets=targets)

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
        parameter of the model was given (used when the engine is built).
        """
        seen: set[str] = set()
        unknown: list[str] = []
        for raw, tensor in named_tensors:
            name = self.normalize_name(raw)
            target = self.targets.get(name)
            if target is None:
                if not name.endswith(_IGNORED_NAME_SUFFIXES):
                    unknown.append(raw)
                continue
            if target.shape != tensor.shape:
                raise ValueError(f"update_weights: {raw} has shape {tuple(tensor.shape)}, the engine's "
                                 f"copy has {tuple(target.shape)}; is this the same model architecture?")
            target.copy_(tensor.detach())
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
        return len(seen)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps), the statistics in float32 (as transformers does)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_rot: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x (..., heads, D) with per-row tables (..., 1, D)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin_rot


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T (+ b) (+ residual), with the residual add fused into the matmul when possible."""
    if residual is None:
        return F.linear(x, w, b)
    out = torch.addmm(residual, x, w.t())
    return out if b is None else out.add_(b)


def mlp(x: torch.Tensor, lw: LayerWeights, residual: torch.Tensor) -> torch.Tensor:
    gu = linear(x, lw.wgu, lw.bgu)
    gate, up = gu.chunk(2, dim=-1)
    return linear(F.silu(gate) * up, lw.wd, lw.bd, residual)


@torch.no_grad()
def prefill(
    w: NativeWeights,
    ids: torch.Tensor,
    cos: torch.Tensor,
    sin_rot: torch.Tensor,
    write_kv,
) -> torch.Tensor:
    """Run right-padded prompts through the model; return the final-norm hidden states (G, P, H).

    ``ids`` (G, P). ``write_kv(layer, k, v)`` receives each layer's rotated keys and values,
    (G, Hkv, P, D). Causal attention alone is exact for every real token: padding sits after
    a prompt's last token, so no real query can see it.
    """
    s = w.spec
    g, p = ids.shape
    x = w.embed[ids.reshape(-1)]                                   # (G*P, H)
    c, sr = cos[:p][None, :, None, :], sin_rot[:p][None, :, None, :]  # (1, P, 1, D)
    for layer, lw in enumerate(w.layers):
        h = rms_norm(x, lw.ln1, s.rms_eps)
        qkv = linear(h, lw.wqkv, lw.bqkv).view(g, p, s.num_heads + 2 * s.num_kv_heads, s.head_dim)
        qk = apply_rope(qkv[:, :, : s.num_heads + s.num_kv_heads], c, sr)
        q = qk[:, :, : s.num_heads].transpose(1, 2)                  # (G, Hq, P, D)
        k = qk[:, :, s.num_heads:].transpose(1, 2)                   # (G, Hkv, P, D)
        v = qkv[:, :, s.num_heads + s.num_kv_heads:].transpose(1, 2)
        write_kv(layer, k, v)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=s.group > 1)
        x = linear(o.transpose(1, 2).reshape(g * p, s.q_dim), lw.wo, lw.bo, x)
        x = mlp(rms_norm(x, lw.ln2, s.rms_eps), lw, x)
    return rms_norm(x, w.norm, s.rms_eps).view(g, p, s.hidden_size)


@dataclass
class DecodeBatch:
    """Per-step indices shared by all layers (built once per decode step by the engine).

    Row b of the batch is a sequence; it belongs to prompt slot ``prefix[b]`` as sample
    ``member[b]`` of at most ``n`` members. Prompt keys/values live once per prompt slot; a
    sequence's own generated keys/values live in its row of the generated-token cache.
    """

    tokens: torch.Tensor       # (B,) long, the last sampled token of each sequence (its KV is not cached yet)
    cos: torch.Tensor          # (B, 1, D) rotary tables at each sequence's position
    sin_rot: torch.Tensor      # (B, 1, D)
    write_at: torch.Tensor     # (B,) long, index in the generated cache where this token's KV goes
    gen_bias: torch.Tensor     # (B*Hkv, 1, T) 0 on generated positions <= write_at, -inf after
    prompt_bias: torch.Tensor  # (G*Hkv, 1, P) 0 on a prompt's positions, -inf on its padding
    group_rows: torch.Tensor   # (G*n,) long, the sequence row of member j of prompt g (any row if none)
    seq_slots: torch.Tensor    # (B,) long, prefix[b] * n + member[b]
    n: int                     # member slots per prompt
    num_prompts: int           # G
    prompt_width: int          # P
    gen_width: int             # T


def attention(q: torch.Tensor, prompt_k, prompt_v, gen_k, gen_v, d: DecodeBatch, scale: float, n_kv: int) -> torch.Tensor:
    """Decode attention of q (B, Hq, D) over each sequence's prompt and its generated tokens.

    Prompt part, shared: the queries of a prompt's n samples are gathered into one (n*r, D)
    block per (prompt, kv head) and multiplied with that prompt's keys once, so a prompt's
    keys/values are read once per step, not n times (prefix sharing; cf. "cascade" /
    shared-prefix attention). Generated part: each sequence against its own keys. One softmax
    over both parts' scores (concatenated per sequence), then each part's probabilities times
    its values. Returns (B, Hq*D).
    """
    b, hq, dim = q.shape
    r = hq // n_kv
    g, n, p, t = d.num_prompts, d.n, d.prompt_width, d.gen_width
    qg = q.view(b, n_kv, r, dim)
    # scores against the prompt, grouped by prompt: (G*Hkv, n*r, P)
    q_grp = qg.index_select(0, d.group_rows).view(g, n, n_kv, r, dim).transpose(1, 2).reshape(g * n_kv, n * r, dim)
    s_p = torch.baddbmm(d.prompt_bias, q_grp, prompt_k.transpose(1, 2), alpha=scale)
    s_p = s_p.view(g, n_kv, n, r, p).transpose(1, 2).reshape(g * n, n_kv, r, p).index_select(0, d.seq_slots)
    # scores against the sequence's own generated tokens: (B*Hkv, r, T)
    s_g = torch.baddbmm(d.gen_bias, qg.reshape(b * n_kv, r, dim), gen_k.transpose(1, 2), alpha=scale)
    scores = torch.cat((s_p, s_g.view(b, n_kv, r, t)), dim=-1)      # (B, Hkv, r, P+T)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.bmm(probs[..., p:].flatten(0, 1), gen_v)            # (B*Hkv, r, D)
    pp = probs[..., :p].index_select(0, d.group_rows).view(g, n, n_kv, r, p).transpose(1, 2).reshape(g * n_kv, n * r, p)
    o_p = torch.bmm(pp, prompt_v).view(g, n_kv, n, r, dim).transpose(1, 2).reshape(g * n, hq * dim)
    return out.view(b, hq * dim).add_(o_p.index_select(0, d.seq_slots))


@torch.no_grad()
def decode(w: NativeWeights, d: DecodeBatch, cache) -> torch.Tensor:
    """One decoding step for every live sequence; returns the next-token logits (B, V) float32.

    ``cache`` provides ``prompt_kv(layer, G)`` -> (k, v) each (G*Hkv, P, D),
    ``gen_kv(layer, B)`` -> (k, v) each (B*Hkv, T, D), and ``write_gen(layer, k, v, at)``.
    """
    s = w.spec
    b = d.tokens.shape[0]
    scale = s.head_dim ** -0.5
    x = w.embed[d.tokens]                                           # (B, H)
    for layer, lw in enumerate(w.layers):
        h = rms_norm(x, lw.ln1, s.rms_eps)
        qkv = linear(h, lw.wqkv, lw.bqkv).view(b, s.num_heads + 2 * s.num_kv_heads, s.head_dim)
        qk = apply_rope(qkv[:, : s.num_heads + s.num_kv_heads], d.cos, d.sin_rot)
        cache.write_gen(layer, qk[:, s.num_heads:], qkv[:, s.num_heads + s.num_kv_heads:], d.write_at)
        pk, pv = cache.prompt_kv(layer, d.num_prompts)
        gk, gv = cache.gen_kv(layer, b)
        o = attention(qk[:, : s.num_heads], pk, pv, gk, gv, d, scale, s.num_kv_heads)
        x = linear(o, lw.wo, lw.bo, x)
        x = mlp(rms_norm(x, lw.ln2, s.rms_eps), lw, x)
    return logits_of(w, rms_norm(x, w.norm, s.rms_eps))


def logits_of(w: NativeWeights, hidden: torch.Tensor) -> torch.Tensor:
    """(N, H) final-norm hidden states -> (N, V) float32 logits."""
    return F.linear(hidden, w.lm_head).float()

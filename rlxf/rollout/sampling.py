"""Batched token sampling with counter-based randomness.

Every sampled token needs one uniform number u in [0, 1). It is a hash of (key, step), where
``key`` comes from the request's seed and the sample's index within its group and ``step`` is
the token's index in the response (splitmix64, Steele et al. 2014). No generator state is
shared between sequences, so a seeded request samples the same tokens alone or in any batch,
in any cache slot, without a per-sequence Python loop.

The token is then drawn by inverting the CDF of the (possibly top-k / top-p truncated)
distribution at u. The log-prob returned is that of the untruncated, temperature-scaled
distribution (see ``rlxf.rollout.base``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rlxf.rollout.base import MIN_TEMPERATURE  # the smallest nonzero temperature, and why

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix64(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser: a bijection of uint64 with good avalanche."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def sample_keys(seeds: np.ndarray, sample_index: np.ndarray) -> np.ndarray:
    """(N,) uint64 stream keys for sample ``sample_index`` of requests seeded ``seeds``."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    idx = np.asarray(sample_index, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return _mix64(_mix64(seeds + _GOLDEN) + (idx + np.uint64(1)) * _GOLDEN)


def uniforms(keys: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """(N,) float64 in [0, 1): the uniform for token ``steps[i]`` of stream ``keys[i]``."""
    keys = np.asarray(keys, dtype=np.uint64)
    steps = np.asarray(steps, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = _mix64(keys + (steps + np.uint64(1)) * _GOLDEN)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def derive_seed(base: int, index: int) -> int:
    """A request seed from a call-level seed and the request's index (in [0, 2**63))."""
    z = _mix64(np.array([base], dtype=np.uint64) ^ _mix64(np.array([index + 1], dtype=np.uint64)))
    return int(z[0] >> np.uint64(1))


def _invert_cdf(cdf: torch.Tensor, allowed: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index i < allowed with cdf[i-1] <= u * mass < cdf[i], per row; never one with zero probability.

    ``cdf`` (N, K) nondecreasing; ``allowed`` (N,) how many leading entries may be drawn. Their
    mass is read off ``cdf`` itself, not summed apart: a separately rounded total can exceed
    ``cdf[allowed - 1]`` by an ulp and let u near 1 draw the first token past the allowed prefix.
    The threshold is kept strictly below the mass so rounding cannot step past it either.
    """
    mass = cdf.gather(-1, (allowed - 1).unsqueeze(-1)).squeeze(-1)
    thresh = (u.to(cdf.dtype) * mass).unsqueeze(-1)
    thresh = torch.minimum(thresh, torch.nextafter(mass, torch.zeros_like(mass)).unsqueeze(-1))
    idx = torch.searchsorted(cdf, thresh, right=True)
    return idx.clamp_(max=cdf.shape[-1] - 1).squeeze(-1)


BLOCK = 64


def _sample_full(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling from (N, V) probabilities in two levels, without a (N, V) cumsum.

    First the block of ``BLOCK`` tokens holding u (from the cumulative block sums), then the
    token inside it (from that block's own cumulative sums). Costs one reduction over the
    probabilities plus (N, V / BLOCK) and (N, BLOCK) work.
    """
    n, v = probs.shape
    if v % BLOCK:
        probs = torch.nn.functional.pad(probs, (0, BLOCK - v % BLOCK))
    blocks = probs.view(n, -1, BLOCK)
    block_mass = blocks.sum(-1)                                     # (N, V/BLOCK)
    block_cdf = block_mass.cumsum(-1)
    total = block_cdf[:, -1].contiguous()
    thresh = torch.minimum(u.to(probs.dtype) * total, torch.nextafter(total, torch.zeros_like(total)))
    b = torch.searchsorted(block_cdf, thresh[:, None], right=True).clamp_(max=block_cdf.shape[-1] - 1)  # (N, 1)
    # Inside block b, search the threshold's offset past the blocks before it (>= 0, as
    # block_cdf[b - 1] <= thresh) in the block's own cumulative sums. Comparing thresh with
    # block_cdf[b] - block_mass[b] + cumsum instead let that differently rounded start lie above
    # thresh and draw the block's first token even at probability 0.
    before = torch.where(b > 0, block_cdf.gather(-1, (b - 1).clamp(min=0)), 0.0).squeeze(-1)
    inner = blocks.gather(1, b[:, :, None].expand(n, 1, BLOCK)).squeeze(1).cumsum(-1)  # (N, BLOCK)
    # block b holds mass > 0 (block_cdf[b] > thresh >= block_cdf[b - 1]); stay below its last
    # cumulative sum so the token drawn has probability > 0
    last = inner[:, -1]
    inner_thresh = torch.minimum(thresh - before, torch.nextafter(last, torch.zeros_like(last)))
    j = torch.searchsorted(inner, inner_thresh[:, None], right=True).clamp_(max=BLOCK - 1)
    return (b * BLOCK + j).squeeze(-1)


class NonFiniteLogits(ValueError):
    """Logits holding NaN or +inf: no distribution to sample from. Without this check greedy
    decoding returned token 0 with NaN log-probs (silently poisoning the trainer's batch) and
    sampling drew ids outside the vocabulary (an index error one step later)."""

    def __init__(self, rows: list[int], where: str = ""):
        self.rows = rows
        in_rows = f" in rows {rows[:8]}" if rows else ""
        super().__init__(
            f"{where}the model's logits hold NaN or +inf{in_rows} of a sampling step, so there is no distribution "
            f"to sample from: the weights hold NaN/inf (a diverged update or a broken checkpoint: check the last "
            f"update_weights / the checkpoint's tensors) or the activations overflow the dtype (float16: use "
            f"bfloat16 or float32)")


def check_sampling(temperature: float, top_p: float = 1.0) -> None:
    """Raise ValueError, naming the field, for a temperature or top_p that cannot be sampled at:
    non-finite, negative, 0 < temperature < ``MIN_TEMPERATURE``, top_p outside (0, 1]."""
    problems = []
    t = float(temperature)
    if not math.isfinite(t) or t < 0:
        problems.append(f"temperature must be a finite number >= 0, 0 = greedy (got {temperature})")
    elif 0.0 < t < MIN_TEMPERATURE:
        problems.append(f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g}; smaller ones overflow "
                        f"logits / temperature (got {temperature}); use 0 for greedy decoding")
    p = float(top_p)
    if not (math.isfinite(p) and 0.0 < p <= 1.0):
        problems.append(f"top_p must be a finite number in (0, 1], 1 = off (got {top_p})")
    if problems:
        raise ValueError("invalid sampling parameters: " + "; ".join(problems))


def _nucleus_size(probs_sorted: torch.Tensor, cdf: torch.Tensor, top_p: float) -> torch.Tensor:
    """(N,) length of the smallest prefix of a descending distribution whose mass reaches ``top_p``."""
    return ((cdf - probs_sorted) < top_p).sum(-1)  # a token is kept when the mass before it is < p


def sample_tokens(
    logits: torch.Tensor,
    u: torch.Tensor | None,
    *,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return (tokens (N,) long, logprobs (N,) float32).

    ``logits`` (N, V) float32; ``u`` (N,) uniforms in [0, 1) (ignored and may be None when
    greedy). ``logprobs[i] = log softmax(logits[i] / T)[token_i]`` (T = 1 when greedy), before
    any top-k / top-p truncation. Top-k is applied first, then top-p on the renormalised top-k
    distribution (the order of transformers' logits processors). ``temperature`` and ``top_p``
    are checked with ``check_sampling`` (NaN, inf and 0 < T < ``MIN_TEMPERATURE`` are refused);
    a row whose logits hold NaN or +inf raises ``NonFiniteLogits``.
    """
    check_sampling(temperature, top_p)
    logits = logits.float()
    top, tokens = logits.max(-1)
    bad = ~torch.isfinite(top)   # a NaN or +inf logit anywhere in the row (max propagates NaN)
    if bool(bad.any()):
        raise NonFiniteLogits(bad.nonzero().flatten().tolist())
    if temperature == 0.0:
        return tokens, -torch.log(torch.exp(logits - top[:, None]).sum(-1))
    x = logits if temperature == 1.0 else logits / temperature
    vocab = x.shape[-1]
    if top_k and top_k < vocab:
        vals, order = torch.topk(x, top_k, dim=-1)  # sorted, descending
        probs = torch.softmax(vals, -1)
        cdf = probs.cumsum(-1)
        allowed = _nucleus_size(probs, cdf, top_p) if top_p < 1.0 else torch.full_like(order[:, 0], top_k)
        tokens = order.gather(-1, _invert_cdf(cdf, allowed, u)[:, None]).squeeze(-1)
        return tokens, x.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(x, -1)
    if top_p < 1.0:
        vals, order = torch.sort(x, dim=-1, descending=True)
        lse = torch.logsumexp(vals, -1)
        probs = torch.exp(vals - lse[:, None])
        cdf = probs.cumsum(-1)
        tokens = order.gather(-1, _invert_cdf(cdf, _nucleus_size(probs, cdf, top_p), u)[:, None]).squeeze(-1)
        return tokens, x.gather(-1, tokens[:, None]).squeeze(-1) - lse
    probs = torch.softmax(x, -1)
    tokens = _sample_full(probs, u)
    p_tok = probs.gather(-1, tokens[:, None]).squeeze(-1)
    logp = torch.log(p_tok)
    tiny = p_tok < 1e-30  # float32 softmax loses precision (denormals, 0): recompute those rows exactly
    if bool(tiny.any()):
        rows = tiny.nonzero().squeeze(-1)
        exact = x[rows].gather(-1, tokens[rows, None]).squeeze(-1) - torch.logsumexp(x[rows], -1)
        logp = logp.index_put((rows,), exact)
    return tokens, logp

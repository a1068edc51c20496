"""Loss aggregation: how per-token losses ``(B, T)`` become the one number to differentiate.

    loss = registry.get("loss_agg", name)(token_loss, mask, num_tokens=..., num_seqs=..., norm=...)

| mode | formula | used by |
|---|---|---|
| ``token_mean`` | Σ_i Σ_t ℓ_it / N_tokens | DAPO (Yu et al. 2025), REINFORCE++ (Hu 2025), PPO-RLHF codebases |
| ``seq_mean_token_mean`` | 1/N_seqs Σ_i (1/\\|y_i\\| Σ_t ℓ_it) | GRPO (Shao et al. 2024), GSPO (Zheng et al. 2025) |
| ``seq_mean_token_sum`` | 1/N_seqs Σ_i Σ_t ℓ_it | RLOO (Ahmadian et al. 2024: the response is one action, log π(y) = Σ_t log π(a_t)) |
| ``seq_mean_token_sum_norm`` | 1/N_seqs Σ_i Σ_t ℓ_it / L | Dr.GRPO (Liu et al. 2025): a constant L, so no length bias |

Sums run over valid tokens only (``mask``). ``seq_mean_token_mean`` weighs every sequence
equally, so each token of a long response counts less — DAPO and Dr.GRPO show this biases
toward long wrong answers; ``token_mean`` weighs every token equally.

Gradient accumulation: when a mini-batch is split into micro-batches, pass the mini-batch's
totals (``loss_totals(mini_batch_mask)``) as ``num_tokens`` / ``num_seqs`` to every
micro-batch call and **sum** the results; the sum is exactly the mini-batch loss. Per-sequence
terms (1/|y_i|) stay local because a sequence is never split across micro-batches. By default
the totals are this call's own.

``num_seqs`` counts sequences with at least one valid token: a fully masked row adds
nothing, not even to the denominator. Zero totals give a loss of 0, not nan.
"""

from __future__ import annotations

import math

from torch import Tensor

from rlxf.algorithms.masked import masked_count, masked_sum, safe_divide
from rlxf.algorithms.registry import register


def loss_totals(mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(num_tokens, num_seqs)`` of a batch, as 0-dim tensors: valid tokens, and rows with any.

    mask: (B, T). Compute on the whole mini-batch and pass to each micro-batch's aggregation.
    """
    per_row = masked_count(mask, dim=-1)
    return per_row.sum(), (per_row > 0).sum().to(per_row.dtype)


def _check(name: str, token_loss: Tensor, mask: Tensor) -> None:
    if token_loss.dim() != 2 or token_loss.shape != mask.shape:
        raise ValueError(
            f"{name}: token_loss {tuple(token_loss.shape)} and mask {tuple(mask.shape)} must both be (B, T)"
        )


def _num_seqs(mask: Tensor, num_seqs: Tensor | float | None) -> Tensor | float:
    return loss_totals(mask)[1] if num_seqs is None else num_seqs


@register("loss_agg", "token_mean")
def token_mean(token_loss: Tensor, mask: Tensor, *, num_tokens: Tensor | float | None = None,
               num_seqs: Tensor | float | None = None, norm: float | None = None) -> Tensor:
    """Σ_{i,t} m_it ℓ_it / num_tokens (default Σ m). (B, T) -> ()."""
    _check("token_mean", token_loss, mask)
    if num_tokens is None:
        num_tokens = masked_count(mask)
    return safe_divide(masked_sum(token_loss, mask), num_tokens)


@register("loss_agg", "seq_mean_token_mean")
def seq_mean_token_mean(token_loss: Tensor, mask: Tensor, *, num_tokens: Tensor | float | None = None,
                        num_seqs: Tensor | float | None = None, norm: float | None = None) -> Tensor:
    """Σ_i (Σ_t m_it ℓ_it / Σ_t m_it) / num_seqs. (B, T) -> ()."""
    _check("seq_mean_token_mean", token_loss, mask)
    per_seq = safe_divide(masked_sum(token_loss, mask, dim=-1), masked_count(mask, dim=-1).to(token_loss.dtype))
    return safe_divide(per_seq.sum(), _num_seqs(mask, num_seqs))


@register("loss_agg", "seq_mean_token_sum")
def seq_mean_token_sum(token_loss: Tensor, mask: Tensor, *, num_tokens: Tensor | float | None = None,
                       num_seqs: Tensor | float | None = None, norm: float | None = None) -> Tensor:
    """Σ_i Σ_t m_it ℓ_it / num_seqs. (B, T) -> ()."""
    _check("seq_mean_token_sum", token_loss, mask)
    return safe_divide(masked_sum(token_loss, mask), _num_seqs(mask, num_seqs))


@register("loss_agg", "seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(token_loss: Tensor, mask: Tensor, *, num_tokens: Tensor | float | None = None,
                            num_seqs: Tensor | float | None = None, norm: float | None = None) -> Tensor:
    """Σ_i Σ_t m_it ℓ_it / (num_seqs · norm), ``norm`` a constant such as the max response length.

    (B, T) -> (). ``norm`` is required: defaulting it to this batch's padded length would make
    the loss scale depend on how the batch was padded and split.
    """
    _check("seq_mean_token_sum_norm", token_loss, mask)
    if norm is None or not (math.isfinite(norm) and norm > 0):
        raise ValueError(
            f"seq_mean_token_sum_norm needs norm > 0 and finite, the constant length normaliser (Dr.GRPO), "
            f"got {norm!r}; pass e.g. algorithm.loss_agg_norm or rollout.max_new_tokens"
        )
    return safe_divide(masked_sum(token_loss, mask) / norm, _num_seqs(mask, num_seqs))

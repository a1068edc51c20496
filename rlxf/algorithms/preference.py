"""Preference losses: DPO and its variants, SimPO, and the Bradley–Terry reward-model loss.

Inputs are per-pair: ``(B,)`` summed log-probabilities log π(y|x) = Σ_t log π(a_t|s_t) of
the chosen (preferred) and rejected responses, or ``(B,)`` scalar scores for a reward
model. Each function returns ``(losses (B,), metrics)``: one loss per pair (take the mean,
or sum and divide by the mini-batch's pair count under gradient accumulation) and a dict
of 0-dim detached tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

DPO_VARIANTS = ("sigmoid", "ipo", "conservative")


def _check_pairs(name: str, **tensors: Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) != 1 or len(next(iter(shapes.values()))) != 1:
        got = ", ".join(f"{k} {s}" for k, s in shapes.items())
        raise ValueError(f"{name}: every input must have the same shape (B,); got {got}")


def _check_beta(name: str, beta: float) -> None:
    """β scales the implicit reward: 0 leaves no gradient (IPO divides by it), a negative β trains
    the rejected response up, and nan or inf makes every loss nan."""
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"{name}: beta must be a finite number > 0 (the implicit reward's scale), got {beta!r}")


def _pair_metrics(chosen_rewards: Tensor, rejected_rewards: Tensor) -> dict[str, Tensor]:
    """Means of the (B,) rewards of chosen and rejected, of their margin, and ``reward_accuracy``:
    the fraction of pairs ranked right, where a pair scores 1 when chosen's reward is higher, 0
    when lower and 0.5 on an exact tie (a coin flip's expected score). A tie thus counts as
    chance, as a model that cannot tell the two apart is, rather than as wrong; and every pair
    keeps its weight of 1/B, so micro-batch accuracies still average by pair count."""
    c, r = chosen_rewards.detach(), rejected_rewards.detach()
    return {
        "reward_chosen": c.mean(),
        "reward_rejected": r.mean(),
        "reward_margin": (c - r).mean(),
        "reward_accuracy": ((c > r).to(c.dtype) + 0.5 * (c == r).to(c.dtype)).mean(),
    }


def dpo_loss(policy_chosen_logps: Tensor, policy_rejected_logps: Tensor, ref_chosen_logps: Tensor,
             ref_rejected_logps: Tensor, *, beta: float = 0.1, variant: str = "sigmoid",
             label_smoothing: float = 0.0) -> tuple[Tensor, dict[str, Tensor]]:
    """Direct preference optimisation and two variants. Inputs (B,); returns (B,) losses.

    With h = (log π(y_w) - log π_ref(y_w)) - (log π(y_l) - log π_ref(y_l)):

    - ``sigmoid`` (Rafailov et al. 2023): ℓ = -log σ(β h)
    - ``conservative`` (cDPO, Mitchell 2023): the preference label is flipped with
      probability ε = ``label_smoothing``: ℓ = -(1 - ε) log σ(β h) - ε log σ(-β h)
    - ``ipo`` (Azar et al. 2023): ℓ = (h - 1/(2β))², a squared loss that does not push h to
      infinity on deterministic preferences. The IPO authors use length-averaged log-probs;
      pass those if you want their setting.

    When the policy equals the reference, h = 0 and the sigmoid/conservative loss is log 2.
    Metrics: implicit rewards β(log π - log π_ref) of chosen and rejected (means), their
    margin, and the fraction of pairs where chosen's reward is higher (an exact tie counts 0.5).
    """
    _check_pairs("dpo_loss", policy_chosen_logps=policy_chosen_logps,
                 policy_rejected_logps=policy_rejected_logps, ref_chosen_logps=ref_chosen_logps,
                 ref_rejected_logps=ref_rejected_logps)
    if variant not in DPO_VARIANTS:
        raise ValueError(f"unknown DPO variant {variant!r}; valid: {', '.join(DPO_VARIANTS)}")
    _check_beta("dpo_loss", beta)
    if variant != "conservative" and label_smoothing != 0.0:
        raise ValueError(
            f"dpo_loss: label_smoothing={label_smoothing} only applies to variant='conservative' "
            f"(got variant={variant!r})"
        )
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"dpo_loss: label_smoothing must be in [0, 0.5), got {label_smoothing}")
    chosen = policy_chosen_logps - ref_chosen_logps.detach()
    rejected = policy_rejected_logps - ref_rejected_logps.detach()
    h = chosen - rejected
    if variant == "ipo":
        losses = (h - 1.0 / (2.0 * beta)).square()
    else:
        eps = label_smoothing
        losses = -(1.0 - eps) * F.logsigmoid(beta * h) - eps * F.logsigmoid(-beta * h)
    return losses, _pair_metrics(beta * chosen, beta * rejected)


def simpo_loss(policy_chosen_logps: Tensor, policy_rejected_logps: Tensor, chosen_lengths: Tensor,
               rejected_lengths: Tensor, *, beta: float = 2.0,
               gamma: float = 1.0) -> tuple[Tensor, dict[str, Tensor]]:
    """SimPO (Meng et al. 2024): reference-free, length-normalised, with a target margin.

        ℓ = -log σ( β/|y_w| log π(y_w) - β/|y_l| log π(y_l) - γ )

    Inputs (B,): summed log-probs and response lengths in tokens (lengths of 0 count as 1).
    Returns (B,) losses. Metrics as ``dpo_loss`` with rewards β/|y| log π(y).
    """
    _check_pairs("simpo_loss", policy_chosen_logps=policy_chosen_logps,
                 policy_rejected_logps=policy_rejected_logps, chosen_lengths=chosen_lengths,
                 rejected_lengths=rejected_lengths)
    _check_beta("simpo_loss", beta)
    dtype = policy_chosen_logps.dtype
    chosen = beta * policy_chosen_logps / chosen_lengths.to(dtype).clamp(min=1)
    rejected = beta * policy_rejected_logps / rejected_lengths.to(dtype).clamp(min=1)
    losses = -F.logsigmoid(chosen - rejected - gamma)
    return losses, _pair_metrics(chosen, rejected)


def bradley_terry_loss(chosen_scores: Tensor, rejected_scores: Tensor,
                       margin: Tensor | float | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Bradley–Terry reward-model loss (Bradley & Terry 1952; Ouyang et al. 2022).

        ℓ = -log σ(r_w - r_l - m)

    Inputs (B,) scalar rewards of the chosen and rejected responses. ``margin`` m (B,) or a
    number (Llama 2, Touvron et al. 2023: larger for clearer preferences) asks the model to
    separate the pair by at least m; None means m = 0. Returns (B,) losses. Metrics:
    ``reward_chosen``, ``reward_rejected``, ``reward_margin``, ``reward_accuracy``.
    """
    _check_pairs("bradley_terry_loss", chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    diff = chosen_scores - rejected_scores
    if margin is not None:
        margin = torch.as_tensor(margin, dtype=diff.dtype, device=diff.device)
        if margin.dim() not in (0, 1) or (margin.dim() == 1 and margin.shape != diff.shape):
            raise ValueError(f"bradley_terry_loss: margin must be a number or (B,), got {tuple(margin.shape)}")
        diff = diff - margin.detach()
    return -F.logsigmoid(diff), _pair_metrics(chosen_scores, rejected_scores)


@dataclass(frozen=True)
class PairLogps:
    """What a DPO-family loss reads, per pair; every field (B,)."""

    chosen: Tensor                 # Σ_t log π_θ(y_w,t | ·), with grad
    rejected: Tensor               # Σ_t log π_θ(y_l,t | ·), with grad
    ref_chosen: Tensor | None      # Σ_t log π_ref(y_w,t | ·); None for reference-free losses
    ref_rejected: Tensor | None
    chosen_lengths: Tensor         # |y_w| in tokens
    rejected_lengths: Tensor


@dataclass(frozen=True)
class PreferenceLoss:
    """A registered DPO-family loss: ``fn(pairs, beta=, label_smoothing=, gamma=)`` -> (losses (B,),
    metrics); ``needs_reference`` tells the trainer whether to compute π_ref's log-probs."""

    fn: Callable[..., tuple[Tensor, dict[str, Tensor]]]
    needs_reference: bool


def _dpo_variant(variant: str) -> Callable[..., tuple[Tensor, dict[str, Tensor]]]:
    def fn(p: PairLogps, *, beta: float, label_smoothing: float, gamma: float):
        del gamma
        return dpo_loss(p.chosen, p.rejected, p.ref_chosen, p.ref_rejected, beta=beta, variant=variant,
                        label_smoothing=label_smoothing)
    return fn


def _simpo(p: PairLogps, *, beta: float, label_smoothing: float, gamma: float):
    del label_smoothing
    return simpo_loss(p.chosen, p.rejected, p.chosen_lengths, p.rejected_lengths, beta=beta, gamma=gamma)


PREFERENCE_LOSSES: dict[str, PreferenceLoss] = {
    "dpo": PreferenceLoss(_dpo_variant("sigmoid"), needs_reference=True),
    "ipo": PreferenceLoss(_dpo_variant("ipo"), needs_reference=True),
    "cdpo": PreferenceLoss(_dpo_variant("conservative"), needs_reference=True),
    "simpo": PreferenceLoss(_simpo, needs_reference=False),
}


def get_preference_loss(name: str) -> PreferenceLoss:
    """The DPO-family loss called ``name``; an unknown name lists the valid ones."""
    if name not in PREFERENCE_LOSSES:
        raise ValueError(f"unknown preference loss {name!r}; valid: {', '.join(PREFERENCE_LOSSES)}")
    return PREFERENCE_LOSSES[name]

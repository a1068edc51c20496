"""KL divergence to the reference policy: per-token estimators and the β controllers.

Estimators (Schulman 2020, "Approximating KL Divergence"), from tokens sampled from π, with
log r_t = log π(a_t|s_t) - log π_ref(a_t|s_t) and ρ_t = π_ref/π = exp(-log r_t):

- ``k1 = log r``: unbiased for KL(π ‖ π_ref), high variance, can be negative;
- ``k2 = ½ (log r)²``: biased, low variance, never negative;
- ``k3 = (ρ - 1) - log ρ``: unbiased, low variance, never negative; capped at ``MAX_K3`` = 10,
  as verl and OpenRLHF cap it (below).

Two ways to use them (``algorithm.kl_mode``):

- as a reward penalty (PPO-RLHF, Ouyang et al. 2022; REINFORCE++): ``kl_shaped_rewards``
  subtracts β·KL_t from the per-token rewards before the advantages, detached;
- as a loss term (GRPO): add β · agg(kl_penalty(...)) to the policy loss.
  As a loss, autograd's gradient of k1 is ∇log π, zero in expectation; k2's is
  log r · ∇log π, the exact reverse-KL gradient on-policy; k3's is (1 - ρ)∇log π, whose
  expectation is the gradient of KL(π_ref ‖ π). GRPO uses k3.

k3 grows as ρ: a sampled token the policy made 1e6 times rarer than π_ref adds 1e6 (4.9e8 at
the exp clamp), outweighing every other token's KL, and as a reward penalty every task reward
of a batch that is whitened (REINFORCE++, GAE). So k3 is capped at 10, reached at ρ = 13.6 and
ρ = 1.7e-5, as verl's ``low_var_kl`` and OpenRLHF's ``compute_approx_kl`` cap it; a capped
token has no KL gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from rlxf.algorithms.masked import zero_masked

MAX_LOG_RATIO = 20.0  # clamp before exp in k3 (a -inf reference log-prob would give inf, then nan)
MAX_K3 = 10.0         # cap on k3's value (module doc)


def _k1(log_ratio: Tensor) -> Tensor:
    return log_ratio


def _k2(log_ratio: Tensor) -> Tensor:
    return 0.5 * log_ratio.square()


def _k3(log_ratio: Tensor) -> Tensor:
    neg = (-log_ratio).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # log ρ
    return (torch.expm1(neg) - neg).clamp(max=MAX_K3)


KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": _k1, "k2": _k2, "k3": _k3}


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3",
               mask: Tensor | None = None) -> Tensor:
    """Per-token KL(π ‖ π_ref) estimate. (B, T), (B, T) -> (B, T).

    ``estimator``: k1, k2 or k3 (see module doc). With ``mask``, masked tokens are 0 with
    gradient 0. ``ref_logprobs`` is a constant (detached).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; valid: {', '.join(KL_ESTIMATORS)}")
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"kl_penalty: logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)} differ"
        )
    if mask is not None and mask.shape != logprobs.shape:
        # torch.where would broadcast a (B,) mask over the token dim and mask columns instead of rows
        raise ValueError(f"kl_penalty: mask {tuple(mask.shape)} must match logprobs {tuple(logprobs.shape)} (B, T)")
    ref_logprobs = ref_logprobs.detach()
    if mask is not None:
        logprobs, ref_logprobs = zero_masked(logprobs, mask), zero_masked(ref_logprobs, mask)
    # a token both policies call impossible (-inf - -inf, nan) is one they agree on: 0, as in
    # masked.summable_log_ratio; nan would fail the whole step as non-finite
    agree = torch.isinf(ref_logprobs) & (logprobs.detach() == ref_logprobs)
    log_ratio = torch.where(agree, torch.zeros_like(logprobs), logprobs - ref_logprobs)
    kl = KL_ESTIMATORS[estimator](log_ratio)
    return kl if mask is None else zero_masked(kl, mask)


def kl_shaped_rewards(rewards: Tensor, logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor,
                      kl_coef: float, estimator: str = "k1") -> Tensor:
    """Per-token rewards with the KL penalty subtracted: r_t - β·KL_t. (B, T) -> (B, T).

    The penalty is detached (it is part of the reward, not differentiated) and 0 on masked
    tokens. PPO-RLHF (Ziegler et al. 2019; Ouyang et al. 2022) uses k1 here.
    """
    kl = kl_penalty(logprobs.detach(), ref_logprobs, estimator, mask=mask)
    return zero_masked(rewards, mask) - kl_coef * kl


class FixedKLController:
    """A constant β. ``update`` does nothing (same interface as AdaptiveKLController)."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_samples: int) -> float:
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """β that tracks a target KL (Ziegler et al. 2019, "Fine-Tuning Language Models from
    Human Preferences", §2.2).

        e = clip(KL / KL_target - 1, -0.2, 0.2)
        β ← β · (1 + e · n_samples / horizon)

    β grows when the measured KL is above target and shrinks below it, by at most 20% per
    ``horizon`` samples.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        if init_kl_coef <= 0 or target <= 0 or horizon < 1:
            raise ValueError(
                f"AdaptiveKLController needs init_kl_coef > 0, target > 0, horizon >= 1; got "
                f"{init_kl_coef}, {target}, {horizon}"
            )
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_samples: int) -> float:
        """Fold in one step's measured KL (mean per sequence or token, as the target is meant)."""
        if not math.isfinite(current_kl):
            return self.value  # a non-finite measurement would poison β for the rest of the run
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_samples / self.horizon
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
        self.target = float(state["target"])
        self.horizon = int(state["horizon"])


def make_kl_controller(kl_coef: float, kl_target: float | None = None,
                       kl_horizon: int = 10000) -> FixedKLController | AdaptiveKLController:
    """The controller the config asks for: adaptive when ``kl_target`` is set, else fixed."""
    if kl_target is None:
        return FixedKLController(kl_coef)
    return AdaptiveKLController(kl_coef, kl_target, kl_horizon)

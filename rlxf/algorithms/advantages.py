"""Advantage estimators: per-token rewards in, per-token advantages and returns out.

Every estimator has the same signature, so the trainer calls whichever the config names::

    advantages, returns = registry.get("advantage", name)(rewards, mask, group_ids, values, params)

- ``rewards (B, T)``: per-token rewards over response tokens. An outcome reward sits on the
  last valid token (``outcome_token_rewards``); per-turn rewards sit on the last model token
  of each turn; a KL penalty in reward mode is on every token. Rewards on masked positions
  are ignored (put a turn's reward on a model token, not on environment tokens).
- ``mask (B, T)``: 1 on tokens that are trained on (model tokens), 0 on padding and on
  environment tokens inside a multi-turn response.
- ``group_ids (B,)`` long: samples of one prompt share an id.
- ``values (B, T) | None``: the critic's V(s_t) (GAE only; the others ignore it).
- ``params``: an ``AdvantageParams``.

Returns ``advantages (B, T)`` Â_t and ``returns (B, T)``, the value targets: the λ-return
for GAE and the discounted reward-to-go G_t = Σ_{k≥t} γ^{k-t} r_k (over valid tokens) for
the others. Both are 0 on masked positions. Returns never depend on normalisation.

Two families:

- token-level (gae, reinforce_pp, reinforce) work from the reward-to-go, so per-turn rewards
  credit only the tokens before them;
- group-level (grpo, maxrl, rloo, reinforce_pp_baseline) score each sample by its whole return
  S = Σ_t r_t (the trajectory-level credit these methods are defined with), compare it with
  the other samples of its group, and give the result to every valid token. ``gamma`` does
  not enter their advantages.

A group of one sample cannot be compared with anything: grpo, maxrl and rloo give it advantage 0
(no gradient) rather than nan (reinforce_pp_baseline's batch normalisation then shifts it by
the batch mean, as OpenRLHF's does). Rows with no valid token get 0 everywhere, and are not
members of their group (a failed episode's reward 0 is no answer: ``algorithms.groups``). Advantages are
data, not differentiated; compute them under ``torch.no_grad()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rlxf.algorithms.groups import group_mean_std
from rlxf.algorithms.masked import float_dtype, masked_sum, masked_whiten, zero_masked
from rlxf.algorithms.registry import Needs, register


@dataclass(frozen=True)
class AdvantageParams:
    """Hyperparameters of the advantage estimators (each uses the ones it names)."""

    gamma: float = 1.0          # discount γ: gae, reinforce, reinforce_pp (and every estimator's returns)
    gae_lambda: float = 0.95    # GAE λ
    norm_by_std: bool = True    # grpo: divide by the group std (False = Dr.GRPO); gae: whiten over the batch
    eps: float = 1e-6           # added to every std before dividing
    baseline: float = 0.0       # reinforce: the moving baseline b, from MovingBaseline.value


def _check_inputs(name: str, rewards: Tensor, mask: Tensor, group_ids: Tensor | None,
                  values: Tensor | None, grouped: bool = False) -> Tensor:
    """Raise on shapes that do not fit (and on missing ``group_ids`` when ``grouped``); return
    ``rewards`` in a float dtype.

    Integer (or bool) rewards, a pass/fail tensor written as ``[[0, 1]]``, would otherwise keep
    their dtype through the group statistics: a mean of 0.5 truncated to 0, a std to 0, and
    GRPO's advantage divided by eps alone (1e6 for a right answer)."""
    if rewards.dim() != 2 or rewards.shape != mask.shape:
        raise ValueError(
            f"{name}: rewards {tuple(rewards.shape)} and mask {tuple(mask.shape)} must both be (B, T)"
        )
    if grouped and group_ids is None:
        raise ValueError(
            f"{name} compares the samples of each prompt but group_ids is None; pass group_ids (B,) long, "
            "one id per prompt shared by its samples, or choose an estimator without groups (reinforce_pp, reinforce)"
        )
    if group_ids is not None and group_ids.shape != rewards.shape[:1]:
        raise ValueError(f"{name}: group_ids {tuple(group_ids.shape)} must be (B,) = ({rewards.shape[0]},)")
    if values is not None and values.shape != rewards.shape:
        raise ValueError(f"{name}: values {tuple(values.shape)} must match rewards {tuple(rewards.shape)}")
    return rewards.to(float_dtype(rewards))


def sequence_scores(rewards: Tensor, mask: Tensor) -> Tensor:
    """Each sample's undiscounted return S = Σ_t r_t over valid tokens. (B, T) -> (B,)."""
    return masked_sum(rewards, mask, dim=-1)


def discounted_returns(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """Reward-to-go G_t = r_t + γ G_{t'} with t' the next valid token; 0 when none. (B, T).

    Masked tokens are skipped (an environment turn inside a response does not discount) and
    hold 0 in the result.
    """
    valid = mask.bool()
    rewards = zero_masked(rewards.to(float_dtype(rewards)), valid)  # γ·G of integer rewards is no integer
    if gamma == 1.0:  # Σ_{k≥t} r_k: a reversed cumulative sum, no loop
        out = rewards.flip(-1).cumsum(-1).flip(-1)
        return zero_masked(out, valid)
    out = torch.zeros_like(rewards)
    running = rewards.new_zeros(rewards.shape[0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = torch.where(valid[:, t], rewards[:, t] + gamma * running, running)
        out[:, t] = running
    return zero_masked(out, valid)


def answered(mask: Tensor) -> Tensor:
    """(B, T) -> (B,) bool: the samples with a valid token, the members of their group's
    statistics (``algorithms.groups``: a failed episode has none, and is no answer)."""
    return mask.bool().any(dim=-1)


def _broadcast(per_sample: Tensor, mask: Tensor) -> Tensor:
    """(B,) -> (B, T): the sample's number on each of its valid tokens, 0 elsewhere."""
    return zero_masked(per_sample[:, None].expand(mask.shape), mask)


@register("advantage", "gae", needs=Needs(values=True))
def gae(rewards: Tensor, mask: Tensor, group_ids: Tensor, values: Tensor | None,
        params: AdvantageParams) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016), for PPO with a critic.

        δ_t = r_t + γ V_{t'} - V_t            (t' the next valid token; V = 0 after the last)
        Â_t = δ_t + γλ Â_{t'}
        returns_t = Â_t + V_t                 (the λ-return, the critic's target)

    The sequence ends after its last valid token (no bootstrap, also for truncated
    responses). With ``params.norm_by_std`` the advantages are whitened over every valid
    token of the batch (PPO practice; Ouyang et al. 2022); returns are not.
    With γ = λ = 1 and no whitening, Â_t = G_t - V_t (reward-to-go minus value).
    """
    rewards = _check_inputs("gae", rewards, mask, group_ids, values)
    if values is None:
        raise ValueError(
            "gae needs values (B, T) from a critic; pass the critic's V(s_t), or choose an "
            "estimator without a critic (grpo, maxrl, rloo, reinforce_pp, reinforce_pp_baseline, reinforce)"
        )
    valid = mask.bool()
    rewards = zero_masked(rewards, valid)
    values = zero_masked(values, valid)
    gamma, lam = params.gamma, params.gae_lambda
    adv = torch.zeros_like(rewards)
    next_value = rewards.new_zeros(rewards.shape[0])
    running = rewards.new_zeros(rewards.shape[0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        v = valid[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = torch.where(v, delta + gamma * lam * running, running)
        next_value = torch.where(v, values[:, t], next_value)
        adv[:, t] = running
    adv = zero_masked(adv, valid)
    returns = zero_masked(adv + values, valid)
    if params.norm_by_std:
        adv = masked_whiten(adv, valid, eps=params.eps)
    return adv, returns


@register("advantage", "grpo", needs=Needs(groups=True))
def grpo(rewards: Tensor, mask: Tensor, group_ids: Tensor, values: Tensor | None,
         params: AdvantageParams) -> tuple[Tensor, Tensor]:
    """Group-relative advantage (Shao et al. 2024, DeepSeekMath, outcome supervision).

        Â_i = (S_i - mean_g(S)) / (std_g(S) + eps)     on every valid token of sample i

    with S_i the sample's return and g its group; the std is unbiased. With
    ``params.norm_by_std=False`` the division is skipped: Dr.GRPO (Liu et al. 2025), which
    argues the std up-weights prompts that are too easy or too hard.
    Groups of one sample get Â = 0. Returns: reward-to-go G_t.
    """
    rewards = _check_inputs("grpo", rewards, mask, group_ids, None, grouped=True)
    scores = sequence_scores(rewards, mask)
    mean, std, _ = group_mean_std(scores, group_ids, answered(mask))
    adv = scores - mean
    if params.norm_by_std:
        adv = adv / (std + params.eps)
    return _broadcast(adv, mask), discounted_returns(rewards, mask, params.gamma)


@register("advantage", "maxrl", needs=Needs(groups=True, nonnegative_returns=True))
def maxrl(rewards: Tensor, mask: Tensor, group_ids: Tensor, values: Tensor | None,
          params: AdvantageParams) -> tuple[Tensor, Tensor]:
    """Maximum-likelihood RL (Tajwar et al. 2026, "Maximum Likelihood Reinforcement Learning").

        Â_i = (S_i - mean_g(S)) / mean_g(S)     on every valid token of sample i

    For a pass/fail reward, mean_g(S) estimates the prompt's pass rate p, and the policy
    gradient with these advantages is the mean of ∇log π over the group's right samples minus
    the mean over all of them: an estimate of ∇log p = ∇p / p, where GRPO's estimates ∇p / σ.
    So every prompt with a right sample pulls as hard as supervised learning on that sample
    would, and prompts already solved pull little (with 8 samples of which 7 are right, the
    right ones get 1/7 and the wrong one -1). A group of one sample, or whose rewards are all 0,
    gets Â = 0 (a group with a nan return, nan). Scores must be ≥ 0 (a pass rate, or partial
    credit in [0, 1]); signed rewards need another estimator: a negative one raises ValueError
    (the one check in this package that reads a tensor's values, a single host sync per step).
    Returns: reward-to-go G_t.
    """
    rewards = _check_inputs("maxrl", rewards, mask, group_ids, None, grouped=True)
    scores = sequence_scores(rewards, mask)
    if (scores < 0).any():
        raise ValueError(
            f"maxrl: a sample's return is {scores[scores < 0].min().item():g}; maxrl divides by the group's mean "
            "return, a pass rate, so returns must be >= 0. Use rewards in [0, 1] (no negative penalties or "
            "shaping), or choose grpo"
        )
    mean, _, size = group_mean_std(scores, group_ids, answered(mask))
    solved = (mean > 0) & (size > 1)
    # a nan return keeps its group nan, as under every other estimator, so the step fails loudly
    # (nan > 0 is False: it would otherwise read as a group without signal, silently)
    adv = torch.where(solved | mean.isnan(), (scores - mean) / torch.where(solved, mean, 1.0), 0.0)
    return _broadcast(adv, mask), discounted_returns(rewards, mask, params.gamma)


@register("advantage", "rloo", needs=Needs(groups=True))
def rloo(rewards: Tensor, mask: Tensor, group_ids: Tensor, values: Tensor | None,
         params: AdvantageParams) -> tuple[Tensor, Tensor]:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024, "Back to Basics").

        Â_i = S_i - 1/(n-1) Σ_{j≠i} S_j = n/(n-1) (S_i - mean_g(S))

    over the n samples of i's group: the baseline excludes the sample itself, so the
    estimator stays unbiased. Groups of one sample get Â = 0. Returns: reward-to-go G_t.
    """
    rewards = _check_inputs("rloo", rewards, mask, group_ids, None, grouped=True)
    scores = sequence_scores(rewards, mask)
    mean, _, size = group_mean_std(scores, group_ids, answered(mask))
    adv = (scores - mean) * size / (size - 1).clamp(min=1)
    return _broadcast(adv, mask), discounted_returns(rewards, mask, params.gamma)


@register("advantage", "reinforce_pp")
def reinforce_pp(rewards: Tensor, mask: Tensor, group_ids: Tensor, values: Tensor | None,
                 params: AdvantageParams) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu 2025): reward-to-go normalised over the whole batch.

        G_t = Σ_{k≥t} γ^{k-t} r_k;   Â_t = (G_t - mean(G)) / (std(G) + eps)

    mean and std over every valid token of the batch (global, not per group). Per-token KL
    penalties belong in ``rewards`` (kl_mode=reward). Returns: G_t.
    """
    rewards = _check_inputs("reinforce_pp", rewards, mask, group_ids, None)
    returns = discounted_returns(rewards, mask, params.gamma)
    return masked_whiten(returns, mask, eps=params.eps), returns


@register("advantage", "reinforce_pp_baseline", needs=Needs(groups=True))
def reinforce_pp_baseline(rewards: Tensor, mask: Tensor, group_ids: Tensor, values: Tensor | None,
                          params: AdvantageParams) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline (Hu 2025): group-mean baseline, then global batch normalisation.

        a_i = S_i - mean_g(S);   Â_i = (a_i - mean(a)) / (std(a) + eps)

    a_i is put on every valid token of sample i, and mean/std are taken over every valid
    token of the batch (so longer samples weigh more, as in the paper's token-level
    normalisation). Returns: reward-to-go G_t.
    """
    rewards = _check_inputs("reinforce_pp_baseline", rewards, mask, group_ids, None, grouped=True)
    scores = sequence_scores(rewards, mask)
    mean, _, _ = group_mean_std(scores, group_ids, answered(mask))
    adv = masked_whiten(_broadcast(scores - mean, mask), mask, eps=params.eps)
    return adv, discounted_returns(rewards, mask, params.gamma)


@register("advantage", "reinforce")
def reinforce(rewards: Tensor, mask: Tensor, group_ids: Tensor, values: Tensor | None,
              params: AdvantageParams) -> tuple[Tensor, Tensor]:
    """REINFORCE with a moving baseline (Williams 1992).

        Â_t = G_t - b,   G_t = Σ_{k≥t} γ^{k-t} r_k

    b = ``params.baseline``, a moving average of past batches' mean return kept by
    ``MovingBaseline`` outside this function (so the estimate stays unbiased: b does not
    depend on the current samples). Returns: G_t.
    """
    rewards = _check_inputs("reinforce", rewards, mask, group_ids, None)
    returns = discounted_returns(rewards, mask, params.gamma)
    return zero_masked(returns - params.baseline, mask), returns


class MovingBaseline:
    """Exponential moving average of the mean return, the baseline b of ``reinforce``.

        b ← decay · b + (1 - decay) · mean_return      (the first update sets b = mean_return)

    The trainer keeps one, passes ``AdvantageParams(baseline=mb.value)`` to whichever
    estimator runs (the others ignore it), and afterwards calls ``mb.update(float(mean S))``
    with the batch's mean sequence return over its answered rows, e.g.
    ``sequence_scores(rewards, mask)[mask.bool().any(-1)].mean()`` (a row without a valid token is no
    answer, as for the group estimators).
    """

    def __init__(self, decay: float = 0.9, value: float = 0.0) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"MovingBaseline decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.value = float(value)
        self.updates = 0

    def update(self, mean_return: float) -> float:
        """Fold one batch's mean return into the baseline; returns the new value.

        A non-finite mean (a nan or inf reward in the batch, whose step fails anyway) is left out:
        folded in, it would make b, and every later advantage, nan for the rest of the run."""
        if not math.isfinite(mean_return):
            return self.value
        if self.updates == 0:
            self.value = float(mean_return)
        else:
            self.value = self.decay * self.value + (1.0 - self.decay) * float(mean_return)
        self.updates += 1
        return self.value

    def state_dict(self) -> dict[str, float | int]:
        return {"decay": self.decay, "value": self.value, "updates": self.updates}

    def load_state_dict(self, state: dict[str, float | int]) -> None:
        self.decay = float(state["decay"])
        self.value = float(state["value"])
        self.updates = int(state["updates"])

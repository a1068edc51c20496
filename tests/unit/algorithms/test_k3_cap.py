"""k3 is capped at 10, as verl's low_var_kl and OpenRLHF's compute_approx_kl cap it."""

from __future__ import annotations

import math

import torch

from rlxf.algorithms import kl_penalty, kl_shaped_rewards, registry
from rlxf.algorithms.advantages import AdvantageParams

D = torch.float64


def test_k3_by_hand_below_and_at_the_cap():
    """k3 = (ρ - 1) - log ρ with log ρ = -log r. Below the cap nothing changes; at log r = -3
    (16.09), -50 (4.85e8 at the ±20 exp clamp) and +50 (e^-20 + 19) it reads 10, verl's value.
    The gradient d k3 / d log π = 1 - ρ below the cap, 0 where capped."""
    logp = torch.tensor([[-2.0, 10.0, -3.0, -50.0, 50.0]], dtype=D, requires_grad=True)
    k3 = kl_penalty(logp, torch.zeros(1, 5, dtype=D), "k3")
    expected = [math.exp(2) - 1 - 2, math.exp(-10) - 1 + 10, 10.0, 10.0, 10.0]
    torch.testing.assert_close(k3, torch.tensor([expected], dtype=D))
    k3.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[1 - math.exp(2), 1 - math.exp(-10), 0, 0, 0]], dtype=D))


def test_k3_stays_finite_in_half_precision():
    """e^20 is past float16's 65504: the uncapped k3 was inf there."""
    logp = torch.tensor([[-50.0, -2.0]], dtype=torch.float16)
    k3 = kl_penalty(logp, torch.zeros_like(logp), "k3")
    assert k3.tolist() == [[10.0, torch.tensor(math.exp(2) - 3, dtype=torch.float16).item()]]


def test_one_far_token_does_not_swamp_a_whitened_batch():
    """KL in the reward (β = 0.1, k3) under REINFORCE++: sample 0 is right (reward 1), sample 1
    wrong (0), and one token of sample 1 has log r = -20 (π_ref/π = e^20). Uncapped, its penalty
    was 0.1 · 4.85e8, and whitening gave the wrong answer's other token the right answer's
    advantage (+0.5 on all three): the task reward was lost. Capped, sample 1 returns
    0 - 0.1 · 10 = -1 on its first token, 0 after. G = [[1, 1], [-1, 0]] over 4 valid tokens:
    mean 0.25, unbiased std √(2.75/3); Â = (G - 0.25) / (std + 1e-6)."""
    mask = torch.ones(2, 2)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    logp = torch.tensor([[0.0, 0.0], [-20.0, 0.0]])
    shaped = kl_shaped_rewards(rewards, logp, torch.zeros(2, 2), mask, 0.1, "k3")
    torch.testing.assert_close(shaped, torch.tensor([[0.0, 1.0], [-1.0, 0.0]]))
    adv, _ = registry.get("advantage", "reinforce_pp")(shaped, mask, torch.tensor([0, 1]), None, AdvantageParams())
    std = math.sqrt(((0.75 ** 2) * 2 + 1.25 ** 2 + 0.25 ** 2) / 3)
    expected = (torch.tensor([[1.0, 1.0], [-1.0, 0.0]]) - 0.25) / (std + 1e-6)
    torch.testing.assert_close(adv, expected)

"""Reward functions for the RL integration tests (named in configs as `rl_plugins:<name>`)."""

from __future__ import annotations

import torch

from rlxf.algorithms import Needs, register
from rlxf.algorithms.advantages import gae


def upper_fraction(sample, **_):
    """Fraction of the response's characters that are capital letters: dense enough that a
    randomly initialised model gets a signal from its first samples (CamelCase BPE pieces)."""
    text = sample.response
    return sum(c.isupper() for c in text) / max(1, len(text))


@register("advantage", "grpo_from_a_plugin_for_tests")
def grpo_from_a_plugin(rewards, mask, group_ids, values, params):
    """GRPO's advantages, registered by a plugin: known only where this module is imported."""
    from rlxf.algorithms.advantages import grpo

    return grpo(rewards, mask, group_ids, values, params)


@register("advantage", "nan_for_tests")
def nan_advantages(rewards, mask, group_ids, values, params):
    """NaN advantages: the loss turns non-finite, so the trainer must skip the step, then stop."""
    nan = torch.full_like(rewards, float("nan"))
    return nan, nan


@register("advantage", "nan_gae_for_tests", needs=Needs(values=True))
def nan_gae_advantages(rewards, mask, group_ids, values, params):
    """GAE's finite returns (the critic trains as usual) with NaN advantages (the actor's loss is
    not finite): the step is skipped on the actor's side only."""
    advantages, returns = gae(rewards, mask, group_ids, values, params)
    return torch.full_like(advantages, float("nan")), returns



def odd_length(sample, **_):
    """1 when the response has an odd number of characters: a coin flip per sample, so some of
    the nano model's groups of 4 agree and most do not (dynamic sampling has both to tell apart)."""
    return float(len(sample.response) % 2)

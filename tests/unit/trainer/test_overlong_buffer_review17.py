"""DAPO's soft overlong buffer, given as a fraction of max_new_tokens, is the token count the
decimal says: in floats 0.29 x 100 is 28.999999999999996, and int() of it started the penalty
one token late."""

from __future__ import annotations

import pytest
import torch

from rlxf.algorithms import overlong_buffer_tokens
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.trainer.experience import ExperienceMaker
from rlxf.types import Prompt, Trajectory


@pytest.mark.parametrize("fraction, max_len, tokens", [
    (0.29, 100, 29), (0.57, 100, 57), (0.35, 180, 63),   # int() of the float product: 28, 56, 62
    (0.25, 8, 2), (0.2, 20480, 4096), (1 / 3, 3, 1),
    (0.125, 10, 1), (0.333, 3, 0), (0.0, 64, 0),          # a fractional token is not one
])
def test_buffer_tokens_are_the_decimal_times_the_length(fraction, max_len, tokens):
    assert overlong_buffer_tokens(fraction, max_len) == tokens


def _traj(length: int) -> Trajectory:
    return Trajectory(prompt=Prompt(uid="q", prompt_ids=[1, 2], prompt_text="q"), group=0,
                      response_ids=[5] * length, response_text="", rollout_logprobs=[-1.0] * length,
                      loss_mask=[1] * length, policy_versions=[0] * length, finish_reason="stop", reward=1.0)


def test_the_penalty_starts_where_the_configured_buffer_says():
    """max_new_tokens 100, buffer 0.29: 29 tokens, so the penalty starts after 71. At 71 tokens it
    is 0; at 72, (71 - 72)/29; at 100, -1 (DAPO eq. 13). With a 28-token buffer 72 was free."""
    maker = ExperienceMaker.from_config(AlgorithmConfig(overlong_buffer=0.29), max_new_tokens=100,
                                        optimizer_steps_per_step=1)
    assert maker.overlong_buffer == 29
    exp, _ = maker([_traj(71), _traj(72), _traj(100)], None, None, None, 0.0)
    torch.testing.assert_close(exp.rewards, torch.tensor([1.0, 1.0 - 1 / 29, 0.0]))

"""Non-finite and subnormal sampling parameters are refused, naming the field."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from rlxf.config.rollout import RolloutConfig
from rlxf.rollout.sampling import MIN_TEMPERATURE, check_sampling, sample_tokens

BAD_T = [math.nan, math.inf, -math.inf, 1e-39, 1e-7, -1.0]


@pytest.mark.parametrize("t", BAD_T)
def test_bad_temperatures_are_refused(t):
    with pytest.raises(ValueError, match="temperature"):
        check_sampling(t)
    logits = torch.randn(2, 50)
    with pytest.raises(ValueError, match="temperature"):
        sample_tokens(logits, torch.full((2,), 0.5), temperature=t)
    with pytest.raises(ValidationError, match="temperature"):
        RolloutConfig(temperature=t)


def test_tiny_temperature_message_points_to_greedy():
    with pytest.raises(ValueError, match="use 0 for greedy"):
        check_sampling(1e-39)
    with pytest.raises(ValidationError, match="use 0 for greedy"):
        RolloutConfig(temperature=1e-39)


@pytest.mark.parametrize("p", [math.nan, math.inf, 0.0, 1.5])
def test_bad_top_p_is_refused(p):
    with pytest.raises(ValueError, match="top_p"):
        check_sampling(1.0, p)
    with pytest.raises(ValidationError, match="top_p"):
        RolloutConfig(top_p=p)


def test_valid_values_still_sample():
    logits = torch.randn(3, 50)
    for t in (0.0, MIN_TEMPERATURE, 0.7, 1.0):
        RolloutConfig(temperature=t)
        tokens, lps = sample_tokens(logits, torch.full((3,), 0.3), temperature=t, top_p=0.9)
        assert torch.isfinite(lps).all() and tokens.shape == (3,)

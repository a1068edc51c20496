"""reward_accuracy scores an exact tie 0.5: a model that cannot tell chosen from rejected is at
chance, not always wrong (hand-derived numbers)."""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.algorithms.preference import bradley_terry_loss, dpo_loss, simpo_loss


def test_a_tie_scores_one_half():
    # pairs: right (1 > 0), tie (0 = 0), right (3 > 1), wrong (0 < 2) -> (1 + 0.5 + 1 + 0) / 4
    _, m = bradley_terry_loss(torch.tensor([1.0, 0.0, 3.0, 0.0]), torch.tensor([0.0, 0.0, 1.0, 2.0]))
    assert m["reward_accuracy"].item() == pytest.approx(2.5 / 4)


def test_policy_equal_to_reference_is_at_chance():
    logps = torch.tensor([-3.0, -5.0, -1.5])
    for variant in ("sigmoid", "ipo", "conservative"):
        loss, m = dpo_loss(logps, logps, logps, logps, variant=variant,
                           label_smoothing=0.1 if variant == "conservative" else 0.0)
        assert m["reward_accuracy"].item() == 0.5 and m["reward_margin"].item() == 0.0
    loss, m = dpo_loss(logps, logps, logps, logps)
    assert loss.mean().item() == pytest.approx(math.log(2))


def test_identical_responses_tie_under_simpo():
    logps, lengths = torch.tensor([-4.0, -2.0]), torch.tensor([4, 2])
    _, m = simpo_loss(logps, logps, lengths, lengths)
    assert m["reward_accuracy"].item() == 0.5

"""A cosine lr schedule follows a run's time budget (train.max_seconds) where it ends before
the step budget: hand-derived multipliers, and the optimizer core taking the lr it is told."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rlxf.config.train import OptimConfig
from rlxf.trainer.optim import lr_lambda
from rlxf.trainer.trainable import TrainableModel


def _cos(progress: float, min_ratio: float = 0.1) -> float:
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize(("step", "time_spent", "expected"), [
    (0, 0.0, 1.0),            # neither has begun
    (0, 0.5, 0.55),           # half the time spent, no step taken: half way down
    (50, 0.25, 0.55),         # half the steps, a quarter of the time: the steps are further
    (10, 0.75, _cos(0.75)),   # the time is further
    (10, 1.0, 0.1),           # the budget spent: min_ratio
    (10, 3.0, 0.1),           # past it (the last step ends after the budget): stays there
])
def test_cosine_is_as_far_along_as_the_further_of_steps_and_time(step, time_spent, expected):
    got = lr_lambda(step, warmup=0, total=100, schedule="cosine", min_ratio=0.1, time_spent=time_spent)
    assert got == pytest.approx(expected)


def test_warmup_and_the_constant_schedule_ignore_the_time():
    assert lr_lambda(1, warmup=4, total=100, schedule="cosine", min_ratio=0.1, time_spent=0.9) == pytest.approx(0.5)
    assert lr_lambda(30, warmup=0, total=100, schedule="constant", min_ratio=0.1, time_spent=0.9) == 1.0


def _core(schedule: str, total: int = 1000) -> TrainableModel:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    return TrainableModel(model, OptimConfig(lr=0.1, schedule=schedule, min_lr_ratio=0.1), total_steps=total)


def _step(core: TrainableModel) -> dict[str, float]:
    x = torch.ones(4, 3)
    return core.train_step([core.model(x).square().mean()])


def test_the_next_step_takes_the_lr_of_the_time_it_was_told():
    core = _core("cosine")
    assert core.lr == pytest.approx(0.1)
    core.follow_time_budget(0.5)
    assert core.lr == pytest.approx(0.055)      # set at once, not one step late
    assert _step(core)["lr"] == pytest.approx(0.055)
    core.follow_time_budget(1.0)
    assert _step(core)["lr"] == pytest.approx(0.01)
    core.follow_time_budget(-1.0)               # out of range: clamped, as at the start
    assert core.lr == pytest.approx(0.1 * _cos(2 / 1000))


def test_the_constant_schedule_keeps_its_lr_whatever_the_time():
    core = _core("constant")
    core.follow_time_budget(0.9)
    assert _step(core)["lr"] == pytest.approx(0.1) and core.lr == pytest.approx(0.1)


def test_a_resumed_core_takes_the_lr_of_the_time_it_resumed_at():
    """The time is not in the checkpoint: the clock is (``TrainClock``), and the loop tells the
    restored core before its first update."""
    first = _core("cosine")
    for spent in (0.1, 0.2, 0.3):
        first.follow_time_budget(spent)
        _step(first)
    resumed = _core("cosine")
    resumed.model.load_state_dict(first.model.state_dict())
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))  # as if from disk: no tensor shared
    resumed.follow_time_budget(0.6)
    first.follow_time_budget(0.6)
    assert resumed.lr == first.lr == pytest.approx(0.1 * _cos(0.6))
    torch.testing.assert_close(_step(resumed)["grad_norm"], _step(first)["grad_norm"])
    for a, b in zip(resumed.model.parameters(), first.model.parameters(), strict=True):
        assert torch.equal(a, b)

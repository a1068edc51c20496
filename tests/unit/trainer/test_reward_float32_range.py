"""A reward float32 cannot hold is refused when the batch is made, naming the sample."""

from __future__ import annotations

import pytest
import torch

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.errors import UserInputError
from rlxf.trainer.experience import ExperienceMaker
from rlxf.types import Prompt, Trajectory


def _traj(uid: str, group: int, reward: float, n: int = 2, token_rewards: list[float] | None = None) -> Trajectory:
    return Trajectory(prompt=Prompt(uid=uid, prompt_ids=[1, 2], prompt_text=uid), group=group,
                      response_ids=[5] * n, response_text="", rollout_logprobs=[-1.0] * n, loss_mask=[1] * n,
                      policy_versions=[0] * n, finish_reason="stop", reward=reward, token_rewards=token_rewards)


@pytest.mark.parametrize("advantage", ["grpo", "reinforce_pp"])
def test_reward_past_float32_is_refused(advantage):
    """1e39 is a finite Python float but inf in float32: GRPO's group became nan (REINFORCE++'s
    whole batch), and the step was skipped as if training had diverged."""
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="grpo", advantage=advantage), 8, 1)
    trajs = [_traj("a", 0, 1.0), _traj("a", 0, 0.0), _traj("b", 1, 1e39), _traj("b", 1, 0.0)]
    with pytest.raises(UserInputError, match=r"prompt b has reward 1e\+39.*float32.*Scale the rewards down"):
        maker(trajs, None, None, None, 0.0)


def test_per_turn_rewards_summing_past_float32_are_refused():
    """Two turns of 2e38 each fit float32, their return 4e38 does not."""
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="grpo"), 8, 1)
    trajs = [_traj("a", 0, 4e38, token_rewards=[2e38, 2e38]), _traj("a", 0, 0.0, token_rewards=[0.0, 0.0])]
    with pytest.raises(UserInputError, match="prompt a has reward 4e\\+38"):
        maker(trajs, None, None, None, 0.0)


def test_large_rewards_that_fit_are_trained_on():
    """1e30 fits: GRPO over [1e30, 0] gives ±(5e29 / (std + eps)) = ±1/√2 (std = 1e30/√2)."""
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="grpo"), 8, 1)
    exp, _ = maker([_traj("a", 0, 1e30), _traj("a", 0, 0.0)], None, None, None, 0.0)
    torch.testing.assert_close(exp.advantages, torch.tensor([[1.0, 1.0], [-1.0, -1.0]]) * 2 ** -0.5)


def test_rewards_whose_differences_overflow_float32_are_refused():
    """Each of ±3e38 fits float32; RLOO's advantage of the first, 3e38 - (-3e38) (the mean of
    the others), does not. It was ±inf, its loss inf, and the step skipped as if training had
    diverged."""
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="rloo"), 8, 1)
    trajs = [_traj("a", 0, 1.0), _traj("a", 0, 0.0), _traj("b", 1, 3e38), _traj("b", 1, -3e38)]
    with pytest.raises(UserInputError, match=r"prompt b \(reward 3e\+38\) has an infinite advantage.*Scale the rewards"):
        maker(trajs, None, None, None, 0.0)


def test_grpo_divides_the_same_rewards_by_their_std_and_trains():
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="grpo"), 8, 1)
    exp, _ = maker([_traj("b", 1, 3e38), _traj("b", 1, -3e38)], None, None, None, 0.0)
    assert torch.isfinite(exp.advantages).all()

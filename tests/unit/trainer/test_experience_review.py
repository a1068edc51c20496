"""ExperienceMaker's state across steps: the moving baseline of ``reinforce``."""

from __future__ import annotations

import torch

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.trainer.experience import ExperienceMaker
from rlxf.types import Prompt, Trajectory


def _traj(reward: float, mask: list[int]) -> Trajectory:
    n = len(mask)
    return Trajectory(prompt=Prompt(uid="q", prompt_ids=[1, 2], prompt_text="q"), group=0,
                      response_ids=[5] * n, response_text="", rollout_logprobs=[-1.0] * n, loss_mask=mask,
                      policy_versions=[0] * n, finish_reason="stop", reward=reward)


def test_reinforce_baseline_leaves_out_failed_episodes():
    """REINFORCE (Williams 1992): Â = G - b, b the moving mean return of past batches. Three
    answers that earn 1 and an episode that failed before the model spoke (no trainable token,
    reward 0): b = 1 after the first batch, so the same batch again has advantage 0. Counting the
    failure's 0 made b = 0.75 and gave every right answer +0.25 at the second step."""
    trajs = [_traj(1.0, [1, 1, 1]) for _ in range(3)] + [_traj(0.0, [0, 0, 0])]
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="grpo", advantage="reinforce"), 8, 1)
    first, _ = maker(trajs, None, None, None, 0.0)
    assert first.advantages[:, 0].tolist() == [1.0, 1.0, 1.0, 0.0]   # b starts at 0
    assert maker.baseline.value == 1.0
    second, _ = maker(trajs, None, None, None, 0.0)
    assert torch.equal(second.advantages, torch.zeros_like(second.advantages))
    # a batch with no answer at all leaves b where it was
    maker([_traj(0.0, [0, 0])], None, None, None, 0.0)
    assert maker.baseline.value == 1.0 and maker.baseline.updates == 2

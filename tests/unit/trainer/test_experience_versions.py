"""Per-token policy versions survive from trajectories to the training batch and its slices."""

from __future__ import annotations

import pytest
import torch

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.trainer.experience import ExperienceMaker, drift_metrics
from rlxf.types import Prompt, Trajectory


def _traj(group: int, versions: list[int], reward: float) -> Trajectory:
    n = len(versions)
    return Trajectory(prompt=Prompt(uid=f"p{group}", prompt_ids=[1, 2], prompt_text="q"), group=group,
                      response_ids=list(range(3, 3 + n)), response_text="a", rollout_logprobs=[-1.0] * n,
                      loss_mask=[1] * n, policy_versions=versions, finish_reason="stop", reward=reward)


def test_policy_versions_reach_the_experience_and_its_mini_batches():
    # a partial rollout's response carries two versions; shorter rows are padded with 0
    trajs = [_traj(0, [4, 4, 5], 1.0), _traj(0, [5], 0.0), _traj(1, [3, 3], 1.0), _traj(1, [5, 5], 0.0)]
    maker = ExperienceMaker.from_config(AlgorithmConfig(), max_new_tokens=8, optimizer_steps_per_step=1)
    exp, _ = maker(trajs, actor=None, reference=None, critic=None, kl_coef=0.0)
    assert exp.old_logprobs is None  # one optimizer step on fresh samples: π_old is the update's first forward
    assert exp.policy_versions.dtype == torch.long
    assert exp.policy_versions.tolist() == [[4, 4, 5], [5, 0, 0], [3, 3, 0], [5, 5, 0]]
    mini = exp.select([1, 3]).trimmed()
    assert mini.policy_versions.tolist() == [[5, 0], [5, 5]]


def test_the_engine_trainer_gap_counts_only_tokens_sampled_with_the_trainers_weights():
    # trainer at version 5: the first row's last token and the second row were sampled with
    # version 5; the rest with version 4 (stale: their gap includes what step 5 trained)
    trajs = [_traj(0, [4, 4, 5], 1.0), _traj(0, [5], 0.0), _traj(1, [4, 4], 1.0)]
    maker = ExperienceMaker.from_config(AlgorithmConfig(), max_new_tokens=8, optimizer_steps_per_step=1)
    exp, _ = maker(trajs, actor=None, reference=None, critic=None, kl_coef=0.0)
    trainer = torch.tensor([[-1.5, -1.5, -1.1], [-0.7, 0.0, 0.0], [-2.0, -3.0, 0.0]])  # rollout: -1.0 everywhere
    m = drift_metrics(exp, trainer, "k1", trainer_version=5)
    assert m["rollout/logprob_gap_mean"] == pytest.approx((0.1 + 0.3) / 2)
    assert m["rollout/logprob_gap_max"] == pytest.approx(0.3)
    assert m["rollout/stale_logprob_gap_mean"] == pytest.approx((0.5 + 0.5 + 1.0 + 2.0) / 4)
    # every token stale: the mismatch cannot be told apart, so no gap is reported
    m = drift_metrics(exp, trainer, "k1", trainer_version=6)
    assert "rollout/logprob_gap_mean" not in m and "rollout/stale_logprob_gap_mean" in m
    # no version given: every token counts (as before versions existed)
    m = drift_metrics(exp, trainer, "k1")
    assert m["rollout/logprob_gap_mean"] == pytest.approx((0.5 + 0.5 + 0.1 + 0.3 + 1.0 + 2.0) / 6)


def test_the_gap_counts_only_the_rows_the_update_ran():
    # the actor skipped row 1 (no signal): its first forward holds no log-probs there (0.0), and
    # the gap of the others is all there is; with no row run there is no gap to report
    trajs = [_traj(0, [5, 5], 1.0), _traj(0, [5, 5], 1.0), _traj(1, [5], 0.0)]
    maker = ExperienceMaker.from_config(AlgorithmConfig(), max_new_tokens=8, optimizer_steps_per_step=1)
    exp, _ = maker(trajs, actor=None, reference=None, critic=None, kl_coef=0.0)
    trainer = torch.tensor([[-1.2, -0.9], [0.0, 0.0], [-1.4, 0.0]])  # rollout: -1.0 everywhere
    m = drift_metrics(exp, trainer, "k1", trainer_version=5, rows=torch.tensor([True, False, True]))
    assert m["rollout/logprob_gap_mean"] == pytest.approx((0.2 + 0.1 + 0.4) / 3)
    assert m["rollout/logprob_gap_max"] == pytest.approx(0.4)
    m = drift_metrics(exp, trainer, "k1", trainer_version=5, rows=torch.tensor([False, False, False]))
    assert "rollout/logprob_gap_mean" not in m


def test_a_token_both_sides_call_impossible_is_no_gap():
    """-inf from the engine and the trainer (a banned token both mask) is agreement, not nan."""
    trajs = [_traj(0, [5, 5], 1.0)]
    maker = ExperienceMaker.from_config(AlgorithmConfig(), max_new_tokens=8, optimizer_steps_per_step=1)
    exp, _ = maker(trajs, actor=None, reference=None, critic=None, kl_coef=0.0)
    exp.rollout_logprobs[0, 1] = -float("inf")
    trainer = torch.tensor([[-1.2, -float("inf")]])
    m = drift_metrics(exp, trainer, "k1", trainer_version=5)
    assert m["rollout/logprob_gap_max"] == pytest.approx(0.2)
    assert m["rollout/logprob_gap_mean"] == pytest.approx(0.1)

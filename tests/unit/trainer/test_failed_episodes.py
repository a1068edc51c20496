"""Samples the model wrote no trainable token of (a failed episode keeps its tokens with
loss_mask 0 and reward 0; an empty response has none): they are not members of their group,
and a micro-batch of them alone trains nothing instead of crashing. Multi-turn responses are
measured per model turn by overlong shaping."""

from __future__ import annotations

import copy

import pytest
import torch

from rlxf.algorithms import dynamic_sampling_keep, group_mean_std, registry, zero_variance_fraction
from rlxf.algorithms.advantages import AdvantageParams
from rlxf.algorithms.aggregation import token_mean
from rlxf.algorithms.policy_losses import PolicyLossParams
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.train import OptimConfig
from rlxf.models import load_model
from rlxf.models.value_model import ValueModel
from rlxf.trainer.experience import ExperienceMaker
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.roles import Actor, Critic, ForwardSpec
from rlxf.types import Experience, Prompt, Trajectory


def _traj(reward: float, mask: list[int], group: int = 0) -> Trajectory:
    n = len(mask)
    return Trajectory(prompt=Prompt(uid=f"q{group}", prompt_ids=[1, 2], prompt_text="q"), group=group,
                      response_ids=[5] * n, response_text="", rollout_logprobs=[-1.0] * n, loss_mask=mask,
                      policy_versions=[0] * n, finish_reason="stop", reward=reward)


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "maxrl", "reinforce_pp_baseline"])
def test_a_failed_episode_makes_no_signal_in_a_group_that_agrees(estimator):
    """Three right answers and a failed episode: every answer agrees, so every advantage is 0
    (counting the failure's 0 gave grpo +0.5 on each right answer)."""
    trajs = [_traj(1.0, [1, 1, 1]) for _ in range(3)] + [_traj(0.0, [0, 0, 0])]
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="grpo", advantage=estimator), 8, 1)
    exp, _ = maker(trajs, None, None, None, 0.0)
    assert torch.equal(exp.advantages, torch.zeros_like(exp.advantages))


def test_group_statistics_count_only_valid_samples():
    scores = torch.tensor([1.0, 0.0, 3.0, 0.0, 5.0, 7.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    valid = torch.tensor([True, True, True, False, False, True])
    mean, std, size = group_mean_std(scores, groups, valid)
    # group 0: 1, 0, 3 -> mean 4/3, unbiased var ((1/3)^2 + (4/3)^2 + (5/3)^2) / 2 = 7/3
    assert mean[:4].tolist() == pytest.approx([4 / 3] * 4)
    assert std[:4].tolist() == pytest.approx([(7 / 3) ** 0.5] * 4)
    assert size.tolist() == [3, 3, 3, 3, 1, 1] and mean[4:].tolist() == [7.0, 7.0] and std[4:].tolist() == [0, 0]
    # an invalid sample's nan stays out of its group's statistics
    mean, std, _ = group_mean_std(scores.where(valid, float("nan")), groups, valid)
    assert torch.isfinite(mean).all() and torch.isfinite(std).all()


def test_dynamic_sampling_and_zero_variance_leave_out_failed_samples():
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    valid = torch.tensor([True, True, False, True, True, False, False])
    # group 0 agrees once its failure is out; group 1 disagrees; group 2 has no answer at all
    assert dynamic_sampling_keep(scores, groups, valid).tolist() == [False] * 3 + [True] * 2 + [False] * 2
    assert float(zero_variance_fraction(scores, groups, valid)) == pytest.approx(2 / 3)
    assert dynamic_sampling_keep(scores, groups).tolist() == [True] * 5 + [False] * 2   # all counted


def test_huge_rewards_keep_a_finite_group_std():
    """The sums run in float64: float32 squares of 1e30 overflow, which made every advantage 0."""
    scores = torch.tensor([1e30, 0.0, 1e30, 0.0])
    adv, _ = registry.get("advantage", "grpo")(scores[:, None], torch.ones(4, 1), torch.zeros(4, dtype=torch.long),
                                                None, AdvantageParams())
    assert adv[:, 0].tolist() == pytest.approx([0.866, -0.866, 0.866, -0.866], abs=1e-3)


def _experience(masks: list[list[int]], advantages: list[float]) -> Experience:
    rows, width = len(masks), max(len(m) for m in masks)
    gen = torch.Generator().manual_seed(0)
    responses = [torch.randint(10, 200, (len(m),), generator=gen).tolist() for m in masks]
    mask = torch.tensor([[float(x) for x in m] + [0.0] * (width - len(m)) for m in masks]).reshape(rows, width)
    adv = torch.tensor(advantages)[:, None] * mask
    return Experience(prompt_ids=[[3, 4, 5]] * rows, response_ids=responses, mask=mask,
                      rollout_logprobs=torch.zeros(rows, width), old_logprobs=None, advantages=adv,
                      group_ids=torch.zeros(rows, dtype=torch.long), rewards=torch.tensor(advantages),
                      ref_logprobs=torch.zeros(rows, width), values=torch.zeros(rows, width),
                      returns=adv.clone())


@pytest.mark.parametrize("settings", [{"algorithm": {"kl_coef": 0.1}, "optim": {}},
                                      {"algorithm": {}, "optim": {"skip_zero_grad_steps": False}}])
def test_rows_without_a_valid_token_train_nothing_and_do_not_crash(nano_model_dir, settings):
    """With micro-batches of one row, an empty response and a failed episode's masked row each
    make a micro-batch of their own (their forward had nothing to backpropagate). The update is
    the one without them, bit for bit, for the losses that run every row."""
    with_failed = _experience([[], [1, 1, 1], [0, 0], [1, 1]], [0.0, 1.0, 0.0, -1.0])
    without = _experience([[1, 1, 1], [1, 1]], [1.0, -1.0])
    without.response_ids = [with_failed.response_ids[1], with_failed.response_ids[3]]
    base = load_model(nano_model_dir)
    objective = PolicyObjective.from_config(AlgorithmConfig(**settings["algorithm"]), max_new_tokens=8)
    actors = [Actor(copy.deepcopy(base), objective, OptimConfig(lr=1e-3, **settings["optim"]), total_steps=10,
                    spec=ForwardSpec(micro_batch_size=1)) for _ in range(2)]
    metrics, _, ran = actors[0].update(with_failed, [[0, 1, 2, 3]], kl_coef=0.1)
    actors[1].update(without, [[0, 1]], kl_coef=0.1)
    assert metrics["skipped"] == 0 and ran.tolist() == [False, True, False, True]
    for (name, a), b in zip(actors[0].model.state_dict().items(), actors[1].model.state_dict().values()):
        assert torch.equal(a, b), name


def test_the_critic_skips_rows_without_a_valid_token(nano_model_dir):
    exp = _experience([[], [1, 1, 1], [0, 0]], [0.0, 1.0, 0.0])
    critic = Critic(ValueModel.from_pretrained(nano_model_dir), OptimConfig(lr=1e-3), total_steps=10, spec=ForwardSpec(micro_batch_size=1),
                    value_clip=None, aggregate=token_mean, agg_norm=None)
    metrics = critic.update(exp, [[0, 1, 2]])
    assert metrics["critic/skipped"] == 0 and metrics["critic/grad_norm"] > 0
    nothing = critic.update(exp, [[0, 2]])   # no row to train on: no step, no crash
    assert nothing["critic/no_signal"] == 1


def test_overlong_shaping_measures_each_model_turn_not_the_whole_episode():
    """Two model turns of 3 tokens around 6 environment tokens, 8 new tokens a turn: not long.
    A single turn of 8 tokens is (DAPO's soft penalty: buffer 0.25 x 8 = 2, the whole penalty
    at the limit)."""
    two_turns = [1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1]
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="dapo", overlong_buffer=0.25), 8, 1)
    exp, metrics = maker([_traj(1.0, two_turns), _traj(0.0, two_turns)], None, None, None, 0.0)
    assert metrics["reward/overlong_penalty"] == 0.0 and exp.rewards.tolist() == [1.0, 0.0]
    exp, metrics = maker([_traj(1.0, [1] * 8), _traj(0.0, [1] * 3)], None, None, None, 0.0)
    assert exp.rewards.tolist() == [0.0, 0.0]
    assert _traj(0.0, two_turns).longest_turn == 3 and _traj(0.0, [0, 0]).longest_turn == 0


def test_cispo_gives_a_minus_infinite_log_prob_no_gradient_and_no_nan():
    logprobs = torch.tensor([[-1.0, -float("inf")]], requires_grad=True)
    loss, _ = registry.get("policy_loss", "cispo")(logprobs, torch.tensor([[-1.0, -2.0]]), torch.ones(1, 2),
                                                   torch.ones(1, 2), PolicyLossParams())
    loss.sum().backward()
    assert torch.isfinite(loss).all() and logprobs.grad.tolist() == [[-1.0, 0.0]]

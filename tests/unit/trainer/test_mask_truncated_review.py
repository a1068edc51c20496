"""``algorithm.mask_truncated`` (overlong filtering: DAPO; TRL's ``mask_truncated_completions``):
a response cut off at max_new_tokens trains nothing, and still counts in its group's baseline,
in dynamic sampling's spread and in the reward metrics. Off (the default) changes nothing."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch

from rlxf.algorithms import dynamic_sampling_keep, loss_totals, outcome_token_rewards, registry
from rlxf.algorithms.advantages import AdvantageParams
from rlxf.algorithms.aggregation import token_mean
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.train import OptimConfig
from rlxf.models import load_model
from rlxf.models.value_model import ValueModel
from rlxf.trainer.collect import informative_samples
from rlxf.trainer.experience import ExperienceMaker, drift_metrics
from rlxf.trainer.objective import PolicyObjective, Totals
from rlxf.trainer.roles import Actor, Critic, ForwardSpec
from rlxf.types import Prompt, Trajectory


def _traj(reward: float, length: int, finish: str = "stop", group: int = 0, seed: int = 0) -> Trajectory:
    gen = torch.Generator().manual_seed(seed)
    return Trajectory(prompt=Prompt(uid=f"q{group}", prompt_ids=[3, 4, 5], prompt_text="q"), group=group,
                      response_ids=torch.randint(10, 200, (length,), generator=gen).tolist(), response_text="",
                      rollout_logprobs=[-1.0] * length, loss_mask=[1] * length, policy_versions=[0] * length,
                      finish_reason=finish, reward=reward)


# one group: a right answer of 2 tokens, a wrong one of 1, a wrong one of 3 cut off at max_new_tokens
GROUP = [_traj(1.0, 2), _traj(0.0, 1, seed=1), _traj(0.0, 3, "length", seed=2)]


def _loss(algo: AlgorithmConfig) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """The policy loss of GROUP at ratio 1 (π_θ = π_old), its gradient on the log-probs, the metrics."""
    exp, metrics = ExperienceMaker.from_config(algo, max_new_tokens=3, optimizer_steps_per_step=1)(
        GROUP, None, None, None, 0.0)
    logprobs = torch.zeros_like(exp.mask, requires_grad=True)
    loss, _ = PolicyObjective.from_config(algo, max_new_tokens=3)(
        logprobs, None, logprobs.detach(), exp.advantages, exp.mask, Totals(*loss_totals(exp.mask)))
    loss.backward()
    return loss, logprobs.grad, metrics


@pytest.mark.parametrize("agg, masked, unmasked", [
    # Dr.GRPO advantages (no std): mean 1/3, so Â = 2/3, -1/3, -1/3; ℓ_t = -Â at ratio 1
    # token_mean, masked: (-2/3·2 + 1/3·1) / 3 tokens = -1/3; unmasked: (-4/3 + 1/3 + 1/3·3) / 6 = 0
    ("token_mean", -1 / 3, 0.0),
    # seq_mean_token_mean, masked: (-2/3 + 1/3) / 2 sequences = -1/6; unmasked: (-2/3 + 1/3 + 1/3) / 3 = 0
    ("seq_mean_token_mean", -1 / 6, 0.0),
    # seq_mean_token_sum_norm (L = 3), masked: (-4/3 + 1/3) / (2·3) = -1/6; unmasked: 0
    ("seq_mean_token_sum_norm", -1 / 6, 0.0),
])
def test_a_truncated_sample_keeps_its_baseline_and_leaves_the_loss_and_its_denominators(agg, masked, unmasked):
    on, grad_on, metrics = _loss(AlgorithmConfig(norm_adv_by_std=False, loss_agg=agg, mask_truncated=True))
    off, grad_off, _ = _loss(AlgorithmConfig(norm_adv_by_std=False, loss_agg=agg))
    assert on.item() == pytest.approx(masked, abs=1e-6) and off.item() == pytest.approx(unmasked, abs=1e-6)
    assert not grad_on[2].any() and grad_off[2, :3].ne(0).all()   # no gradient reaches the cut-off response
    # the masked share: 1 of 3 samples, 3 of 6 tokens
    assert metrics["response/truncated_masked_frac"] == pytest.approx(1 / 3)
    assert metrics["response/truncated_masked_token_frac"] == pytest.approx(0.5)


def test_off_by_default_the_experience_is_the_one_without_the_option_bit_for_bit():
    maker = ExperienceMaker.from_config(AlgorithmConfig(), max_new_tokens=3, optimizer_steps_per_step=1)
    exp, metrics = maker(GROUP, None, None, None, 0.0)
    mask = torch.tensor([[1.0, 1, 0], [1, 0, 0], [1, 1, 1]])
    rewards = outcome_token_rewards(torch.tensor([1.0, 0.0, 0.0]), mask)
    advantages, _ = registry.get("advantage", "grpo")(rewards, mask, torch.zeros(3, dtype=torch.long), None,
                                                      AdvantageParams())
    assert torch.equal(exp.mask, mask) and torch.equal(exp.advantages, advantages)
    assert not any(k.startswith("response/truncated") for k in metrics)


def test_every_sample_truncated_trains_nothing_and_gives_no_nan(nano_model_dir):
    """A step whose samples were all cut off: loss 0 over 0 tokens, not 0/0, and no optimizer step."""
    algo = AlgorithmConfig(mask_truncated=True)
    trajs = [_traj(float(i % 2), 3, "length", seed=i) for i in range(4)]
    exp, metrics = ExperienceMaker.from_config(algo, 3, 1)(trajs, None, None, None, 0.0)
    assert metrics["response/truncated_masked_frac"] == 1.0 and not exp.mask.any() and not exp.advantages.any()
    actor = Actor(load_model(nano_model_dir), PolicyObjective.from_config(algo, 3), OptimConfig(lr=1e-2),
                  total_steps=10, spec=ForwardSpec(micro_batch_size=2))
    before = copy.deepcopy(actor.model.state_dict())
    out, _, ran = actor.update(exp, [[0, 1, 2, 3]], kl_coef=0.0)
    assert not ran.any() and out["no_signal"] == 1.0 and out["skipped"] == 0.0
    assert all(value == value for value in out.values()), out   # no nan metric
    for name, value in actor.model.state_dict().items():
        assert torch.equal(value, before[name]), name


class _ZeroCritic:
    def values(self, prompt_ids, response_ids):
        return torch.zeros(len(response_ids), max(map(len, response_ids)))


def test_ppo_fits_no_value_to_a_truncated_response(nano_model_dir):
    """GAE ends a cut-off response as if it had finished, so its value targets are not its return:
    the critic's update is the one without that row, bit for bit."""
    algo = AlgorithmConfig(name="ppo", mask_truncated=True)
    exp, _ = ExperienceMaker.from_config(algo, 3, 1)(GROUP, None, None, _ZeroCritic(), 0.0)
    assert not exp.mask[2].any() and not exp.returns[2].any() and exp.returns[0].any()
    critics = [Critic(ValueModel.from_pretrained(nano_model_dir), OptimConfig(lr=1e-3), total_steps=10,
                      spec=ForwardSpec(micro_batch_size=1), value_clip=None, aggregate=token_mean, agg_norm=None)
               for _ in range(2)]
    critics[0].update(exp, [[0, 1, 2]])
    critics[1].update(exp, [[0, 1]])
    for (name, a), b in zip(critics[0].model.state_dict().items(), critics[1].model.state_dict().values()):
        assert torch.equal(a, b), name


def test_dynamic_sampling_drops_groups_whose_spread_is_only_in_masked_samples():
    trajs = [
        _traj(1.0, 2, group=0), _traj(0.0, 3, "length", group=0), _traj(0.0, 3, "length", group=0),  # 1 pushed up
        _traj(1.0, 3, "length", group=1), _traj(0.0, 3, "length", group=1),  # every sample masked
        _traj(0.0, 3, "length", group=2), _traj(1.0, 2, group=2), _traj(2.0, 3, "length", group=2),  # Â = 0 on the 1
        _traj(1.0, 2, group=3), _traj(1.0, 2, group=3),  # no spread at all
    ]
    assert informative_samples(trajs, mask_truncated=False) == [True] * 8 + [False] * 2
    assert informative_samples(trajs, mask_truncated=True) == [True] * 3 + [False] * 7
    # without `trained` the function is the one it was
    scores, groups = torch.tensor([1.0, 0.0, 2.0, 2.0]), torch.tensor([0, 0, 1, 1])
    assert dynamic_sampling_keep(scores, groups).tolist() == [True, True, False, False]
    assert dynamic_sampling_keep(scores, groups, trained=torch.tensor([False, False, True, True])).tolist() == \
        [False] * 4


def test_a_step_that_measured_no_token_reports_no_kl_and_leaves_an_adaptive_beta():
    """Every sample masked (all cut off, or failed episodes): KL over no token is no measurement.
    Reported as 0 it made the adaptive controller (kl_target 0.05) shrink β, 0.1 -> 0.0996."""
    algo = AlgorithmConfig(mask_truncated=True, kl_coef=0.1)
    exp, _ = ExperienceMaker.from_config(algo, 3, 1)([_traj(1.0, 3, "length"), _traj(0.0, 2, "length")],
                                                     None, None, None, 0.0)
    exp = replace(exp, ref_logprobs=torch.full_like(exp.mask, -5.0))
    drift = drift_metrics(exp, torch.zeros_like(exp.mask), "k3", trainer_version=0)
    assert "kl" not in drift and drift["rollout/logprob_gap_max"] == 0.0
    # a measured token still gives the KL: k3 at log r = 5 is e^-5 - 1 + 5
    exp.mask[0, 0] = 1.0
    assert drift_metrics(exp, torch.zeros_like(exp.mask), "k3")["kl"] == pytest.approx(math.exp(-5) + 4)

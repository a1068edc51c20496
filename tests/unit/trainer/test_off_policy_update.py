"""Off-policy corrections in the actor's update on the nano model, fed hand-built experience."""

from __future__ import annotations

import pytest
import torch

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.train import OptimConfig
from rlxf.models import load_model
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.roles import Actor, ForwardSpec
from rlxf.types import Experience

SPEC = ForwardSpec(micro_batch_size=2)
CORRECTIONS = ("tis", "mis", "decoupled")


def _actor(model_dir, correction: str) -> Actor:
    objective = PolicyObjective.from_config(AlgorithmConfig(off_policy=correction), max_new_tokens=8)
    return Actor(load_model(model_dir), objective, OptimConfig(lr=1e-2), total_steps=10, spec=SPEC)


def _experience(actor: Actor, rollout_shift: float) -> Experience:
    """4 random prompt/response pairs; π_old recomputed by the trainer, π_rollout = π_old shifted."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 200, (5,), generator=gen).tolist() for _ in range(4)]
    responses = [torch.randint(10, 200, (3 + i % 3,), generator=gen).tolist() for i in range(4)]
    width = max(len(r) for r in responses)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in responses])
    old = actor.logprobs(prompts, responses)
    adv = torch.randn(4, 1, generator=gen) * mask
    shift = rollout_shift * torch.randn(4, width, generator=gen)
    return Experience(prompt_ids=prompts, response_ids=responses, mask=mask, rollout_logprobs=old + shift,
                      old_logprobs=old, advantages=adv, group_ids=torch.arange(4) // 2, rewards=adv[:, 0])


def _updated(model_dir, correction: str, rollout_shift: float) -> tuple[dict, dict]:
    actor = _actor(model_dir, correction)
    exp = _experience(actor, rollout_shift)
    metrics, _, _ = actor.update(exp, [[0, 1, 2, 3]], kl_coef=0.0)
    return {k: v.detach().clone() for k, v in actor.model.state_dict().items()}, metrics


@pytest.fixture(scope="module")
def uncorrected(nano_model_dir):
    """The update without a correction, engine and trainer agreeing (computed once)."""
    return _updated(nano_model_dir, "none", 0.0)


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_a_correction_changes_nothing_when_the_engine_agrees_with_the_trainer(nano_model_dir, uncorrected,
                                                                               correction):
    base, base_metrics = uncorrected
    weights, metrics = _updated(nano_model_dir, correction, 0.0)
    assert all(torch.equal(base[k], weights[k]) for k in base), correction  # ρ = 1 exactly: bit-identical
    assert metrics["policy/loss"] == base_metrics["policy/loss"]
    assert metrics["off_policy/weight_mean"] == 1.0 and metrics["off_policy/ratio_max"] == 1.0
    assert not any(k.startswith("off_policy/") for k in base_metrics)


def test_a_correction_changes_the_update_when_the_engine_disagrees(nano_model_dir):
    # the equality above is not vacuous: with π_rollout ≠ π_old, TIS moves the weights differently
    base, _ = _updated(nano_model_dir, "none", 0.5)
    weights, metrics = _updated(nano_model_dir, "tis", 0.5)
    assert any(not torch.equal(base[k], weights[k]) for k in base)
    assert metrics["off_policy/ratio_max"] > 1.0 and 0 < metrics["off_policy/weight_max"] <= 2.0

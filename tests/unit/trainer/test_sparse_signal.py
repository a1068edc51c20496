"""Steps without learning signal change nothing; a few informative samples weigh as few.

The actor on the nano model, fed hand-built experience: the invariants of DESIGN.md's
"Steps without signal change nothing", and the evidence that the old behaviour broke them.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from rlxf.algorithms import register
from rlxf.algorithms.policy_losses import ppo_clip
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.train import OptimConfig
from rlxf.models import load_model
from rlxf.trainer.experience import ExperienceMaker
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.optim import any_nonzero_grad
from rlxf.trainer.roles import Actor, ForwardSpec, Reference
from rlxf.types import Experience, Prompt, Trajectory

SPEC = ForwardSpec(micro_batch_size=4)


def _experience(rows: int, advantage: float | None, seed: int = 0) -> Experience:
    """``rows`` random prompt/response pairs (2 per group); advantages all ``advantage``, or random."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, 200, (5,), generator=gen).tolist() for _ in range(rows)]
    responses = [torch.randint(10, 200, (3 + i % 3,), generator=gen).tolist() for i in range(rows)]
    width = max(len(r) for r in responses)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in responses])
    adv = torch.randn(rows, 1, generator=gen) if advantage is None else torch.full((rows, 1), advantage)
    return Experience(prompt_ids=prompts, response_ids=responses, mask=mask,
                      rollout_logprobs=torch.zeros(rows, width), old_logprobs=None,
                      advantages=adv * mask, group_ids=torch.arange(rows) // 2,
                      rewards=adv.squeeze(1))


def _actor(model_dir, *, skip: bool = True, entropy_coef: float = 0.0, mini_batch_size: int | None = None,
           max_grad_norm: float | None = 1.0, **algorithm) -> Actor:
    optim = OptimConfig(lr=1e-2, weight_decay=0.1, skip_zero_grad_steps=skip, max_grad_norm=max_grad_norm,
                        warmup_steps=3)
    objective = PolicyObjective.from_config(AlgorithmConfig(entropy_coef=entropy_coef, **algorithm), max_new_tokens=8)
    return Actor(load_model(model_dir), objective, optim, total_steps=200, spec=SPEC,
                 mini_batch_size=mini_batch_size)


def _snapshot(actor: Actor) -> tuple[dict, dict, dict]:
    weights = {k: v.detach().clone() for k, v in actor.model.state_dict().items()}
    return weights, copy.deepcopy(actor.optimizer.state_dict()), copy.deepcopy(actor.scheduler.state_dict())


def _assert_same(a, b) -> None:
    """Bit-identical nested structures of tensors and plain values."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


def test_hundred_steps_of_zero_advantages_leave_weights_and_optimizer_state_bit_identical(nano_model_dir):
    actor = _actor(nano_model_dir)
    # one informative step first: AdamW's moments are non-zero, the case where stepping on zero
    # gradients would keep moving the weights
    metrics, _, _ = actor.update(_experience(4, None), [[0, 1, 2, 3]], kl_coef=0.0)
    assert metrics["no_signal"] == 0.0
    before = _snapshot(actor)
    zeros = _experience(4, 0.0, seed=1)
    for _ in range(100):
        metrics, _, _ = actor.update(zeros, [[0, 1], [2, 3]], kl_coef=0.0)
        assert metrics["no_signal"] == 1.0 and metrics["skipped"] == 0.0
        assert metrics["groups/zero_variance_frac"] == 1.0
    after = _snapshot(actor)
    _assert_same(before, after)


def test_without_the_skip_adamw_momentum_moves_the_weights_on_zero_gradients(nano_model_dir):
    """The old behaviour (and the reason for the skip): zero gradients, yet every weight moves."""
    actor = _actor(nano_model_dir, skip=False)
    actor.update(_experience(4, None), [[0, 1, 2, 3]], kl_coef=0.0)
    weights, opt_state, _ = _snapshot(actor)
    metrics, _, _ = actor.update(_experience(4, 0.0, seed=1), [[0, 1, 2, 3]], kl_coef=0.0)
    assert metrics["no_signal"] == 0.0 and metrics["grad_norm"] == 0.0
    moved = [k for k, v in actor.model.state_dict().items() if not torch.equal(v, weights[k])]
    assert len(moved) == len(weights)
    state = actor.optimizer.state_dict()["state"]
    assert any(not torch.equal(state[i]["exp_avg_sq"], opt_state["state"][i]["exp_avg_sq"]) for i in state)


def test_an_entropy_bonus_is_signal_even_with_zero_advantages(nano_model_dir):
    actor = _actor(nano_model_dir, entropy_coef=0.01)
    weights, _, _ = _snapshot(actor)
    metrics, _, _ = actor.update(_experience(4, 0.0), [[0, 1, 2, 3]], kl_coef=0.0)
    assert metrics["no_signal"] == 0.0
    assert any(not torch.equal(v, weights[k]) for k, v in actor.model.state_dict().items())


def test_a_few_kept_samples_weigh_as_a_fraction_of_the_configured_batch(nano_model_dir):
    """2 informative samples of a configured mini-batch of 8: the gradient is 2/8 of the one
    that divides by the samples present (the same samples, the same weights)."""
    exp = _experience(2, None, seed=3)
    kept = _actor(nano_model_dir, mini_batch_size=None, max_grad_norm=None)
    configured = _actor(nano_model_dir, mini_batch_size=8, max_grad_norm=None)
    m_kept, _, _ = kept.update(exp, [[0, 1]], kl_coef=0.0)
    m_conf, _, _ = configured.update(exp, [[0, 1]], kl_coef=0.0)
    assert m_kept["batch_fraction"] == 1.0 and m_conf["batch_fraction"] == 0.25
    assert m_conf["grad_norm"] == pytest.approx(0.25 * m_kept["grad_norm"], rel=1e-5)
    assert m_conf["policy/loss"] == pytest.approx(m_kept["policy/loss"], rel=1e-6)  # metrics: unscaled


def test_a_full_mini_batch_is_not_scaled(nano_model_dir):
    exp = _experience(4, None, seed=4)
    plain = _actor(nano_model_dir, mini_batch_size=None)
    configured = _actor(nano_model_dir, mini_batch_size=4)
    plain.update(exp, [[0, 1, 2, 3]], kl_coef=0.0)
    configured.update(exp, [[0, 1, 2, 3]], kl_coef=0.0)
    _assert_same(plain.model.state_dict(), configured.model.state_dict())


def _gradients_stepped_on(actor: Actor) -> list[dict[str, torch.Tensor]]:
    """The gradient of each optimizer step the actor takes from now on, as the step sees it."""
    seen: list[dict[str, torch.Tensor]] = []
    step = actor._optimizer_step

    def spy(finite: bool):
        seen.append({n: p.grad.clone() for n, p in actor.model.named_parameters() if p.grad is not None})
        return step(finite)

    actor._optimizer_step = spy
    return seen


@pytest.fixture
def every_row_loss() -> str:
    """ppo_clip itself, registered without the declaration that a zero-advantage row adds
    nothing: the actor runs every row of it, as it did before rows were skipped."""
    register("policy_loss", "ppo_clip_every_row_for_tests")(ppo_clip)
    return "ppo_clip_every_row_for_tests"


def test_rows_without_signal_are_not_run_and_the_step_is_the_full_batchs(nano_model_dir, every_row_loss):
    exp = _experience(4, None, seed=5)
    exp.advantages[[1, 3]] = 0.0   # rows 1 and 3 carry no signal (a group whose rewards agreed)
    skipping = _actor(nano_model_dir, max_grad_norm=None)
    every_row = _actor(nano_model_dir, max_grad_norm=None, policy_loss=every_row_loss)
    assert not skipping.objective.zero_advantage_rows and every_row.objective.zero_advantage_rows
    g_skip, g_all = _gradients_stepped_on(skipping), _gradients_stepped_on(every_row)
    m_skip, first_skip, ran_skip = skipping.update(exp, [[0, 1, 2, 3]], kl_coef=0.0)
    m_all, first_all, ran_all = every_row.update(exp, [[0, 1, 2, 3]], kl_coef=0.0)
    assert ran_skip.tolist() == [True, False, True, False] and ran_all.all()
    assert m_skip["rows_run_frac"] == 0.5 and m_all["rows_run_frac"] == 1.0
    # the same gradient: the skipped rows' share is exactly 0, so only the rounding of the
    # batch's matmuls differs
    assert m_skip["policy/loss"] == pytest.approx(m_all["policy/loss"], rel=1e-6)
    assert m_skip["grad_norm"] == pytest.approx(m_all["grad_norm"], rel=1e-5)
    assert g_skip[0].keys() == g_all[0].keys()
    for k, g in g_skip[0].items():
        torch.testing.assert_close(g, g_all[0][k], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(first_skip[[0, 2]], first_all[[0, 2]], rtol=1e-6, atol=1e-6)
    assert not first_skip[[1, 3]].any()
    # the metrics describe the rows that ran: the entropy of rows 0 and 2 alone
    alone = _actor(nano_model_dir, max_grad_norm=None, policy_loss=every_row_loss)
    m_alone, _, _ = alone.update(exp.select([0, 2]), [[0, 1]], kl_coef=0.0)
    assert m_skip["entropy"] == pytest.approx(m_alone["entropy"], rel=1e-6)


@pytest.mark.parametrize("setting", [dict(entropy_coef=0.01), dict(kl_coef=0.1, kl_mode="loss"), dict(skip=False),
                                     dict(policy_loss="ppo_clip_every_row_for_tests")])
def test_every_row_runs_when_a_zero_advantage_row_can_move_the_model(nano_model_dir, every_row_loss, setting):
    """An entropy bonus or a KL term pulls on every row; a plugin loss that does not declare
    otherwise may; and ``skip_zero_grad_steps: false`` keeps the old step on zero gradients."""
    exp = _experience(4, None, seed=6)
    exp.advantages[[0, 1]] = 0.0
    if "kl_coef" in setting:
        exp = replace(exp, ref_logprobs=torch.zeros_like(exp.mask) - 1.0)
    metrics, _, ran = _actor(nano_model_dir, **setting).update(exp, [[0, 1, 2, 3]], kl_coef=0.1)
    assert ran.all() and metrics["rows_run_frac"] == 1.0


def test_a_mini_batch_without_signal_runs_no_row_and_takes_no_step(nano_model_dir):
    actor = _actor(nano_model_dir)
    actor.update(_experience(4, None), [[0, 1, 2, 3]], kl_coef=0.0)
    exp = _experience(4, None, seed=7)
    exp.advantages[[0, 1]] = 0.0
    steps = actor.scheduler.state_dict()["last_epoch"]
    metrics, _, ran = actor.update(exp, [[0, 1], [2, 3]], kl_coef=0.0)
    assert ran.tolist() == [False, False, True, True]
    assert metrics["no_signal"] == 0.5 and metrics["rows_run_frac"] == 0.5
    assert actor.scheduler.state_dict()["last_epoch"] == steps + 1   # the second mini-batch's step only


def _group_trajectories() -> list[Trajectory]:
    """Two groups of two: group 0's rewards agree (no signal), group 1's differ."""
    gen = torch.Generator().manual_seed(8)
    out = []
    for i, (group, reward) in enumerate([(0, 1.0), (0, 1.0), (1, 1.0), (1, 0.0)]):
        response = torch.randint(10, 200, (3 + i % 2,), generator=gen).tolist()
        out.append(Trajectory(prompt=Prompt(uid=f"p{group}", prompt_ids=torch.randint(10, 200, (5,), generator=gen).tolist(),
                                            prompt_text="q"),
                              group=group, response_ids=response, response_text="a",
                              rollout_logprobs=[-1.0] * len(response), loss_mask=[1] * len(response),
                              policy_versions=[0] * len(response), finish_reason="stop", reward=reward))
    return out


@pytest.mark.parametrize("every_row", [False, True])
def test_pi_old_is_recomputed_for_the_rows_the_update_runs(nano_model_dir, every_row_loss, every_row):
    """With several optimizer steps per RL step π_old gets a forward of its own before the
    update. It runs the rows the update will run: group 1's, not group 0's (advantage 0), whose
    π_old stays 0; a loss that runs every row gets every row's. The update never reads the
    skipped rows' π_old: any values there give the same weights, bit for bit."""
    setting = dict(policy_loss=every_row_loss) if every_row else {}
    actor, twin = (_actor(nano_model_dir, max_grad_norm=None, mini_batch_size=2, **setting) for _ in range(2))
    maker = ExperienceMaker.from_config(AlgorithmConfig(**setting), max_new_tokens=8, optimizer_steps_per_step=2)
    forwarded = []
    real = actor.logprobs
    actor.logprobs = lambda prompts, responses: forwarded.append(len(prompts)) or real(prompts, responses)
    exp, _ = maker(_group_trajectories(), actor, reference=None, critic=None, kl_coef=0.0)
    assert forwarded == [4 if every_row else 2]
    run, skipped = ([0, 1, 2, 3], []) if every_row else ([2, 3], [0, 1])
    # a forward over every row gives the same π_old, to the rounding of another batch's matmuls
    every = real(exp.prompt_ids, exp.response_ids)
    torch.testing.assert_close(exp.old_logprobs[run], every[run], rtol=1e-5, atol=1e-5)
    assert not exp.old_logprobs[skipped].any()
    other = exp.old_logprobs.clone()
    other[skipped] = -3.0
    plan = [[0, 2], [1, 3]]
    m, _, ran = actor.update(exp, plan, kl_coef=0.0)
    m_twin, _, _ = twin.update(replace(exp, old_logprobs=other), plan, kl_coef=0.0)
    assert ran.tolist() == [row in run for row in range(4)]
    assert m == m_twin
    _assert_same(actor.model.state_dict(), twin.model.state_dict())


def test_kl_in_the_reward_recomputes_pi_old_for_every_row(nano_model_dir):
    """KL-in-reward shapes the rewards with π_old before there are advantages to skip rows by."""
    actor = _actor(nano_model_dir, mini_batch_size=2)
    maker = ExperienceMaker.from_config(AlgorithmConfig(kl_coef=0.1, kl_mode="reward"), max_new_tokens=8,
                                        optimizer_steps_per_step=2)
    trajs = _group_trajectories()
    ref = Reference(load_model(nano_model_dir), SPEC)
    exp, _ = maker(trajs, actor, reference=ref, critic=None, kl_coef=0.1)
    assert exp.old_logprobs.ne(0).any(dim=1).all()


def test_actor_rejects_a_mini_batch_size_below_one(nano_model_dir):
    with pytest.raises(ValueError, match="mini_batch_size must be >= 1"):
        _actor(nano_model_dir, mini_batch_size=0)


def _param(*values: float, grad: list[float] | None) -> torch.nn.Parameter:
    p = torch.nn.Parameter(torch.tensor(values))
    p.grad = None if grad is None else torch.tensor(grad)
    return p


@pytest.mark.parametrize(("grads", "expected"), [
    ([[0.0, 0.0], [0.0]], False),
    ([[0.0, -0.0], None], False),            # -0.0 is zero; a parameter without a gradient is none
    ([None, None], False),
    ([[0.0, 1e-30], [0.0]], True),           # a norm would underflow to 0 here; the test must not
    ([[0.0, float("nan")], [0.0]], True),    # non-finite is not "no signal": the step is skipped as non-finite
])
def test_any_nonzero_grad(grads, expected):
    params = [_param(*([1.0] * (len(g) if g is not None else 1)), grad=g) for g in grads]
    assert any_nonzero_grad(params) is expected

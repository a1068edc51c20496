"""The trainers' math on the nano model, against straightforward reimplementations: the actor's
and critic's gradients (and the critic's metrics) do not depend on how a mini-batch is split into
micro-batches, the actor's gradient is the objective's written out by hand, and a model with
dropout in its architecture compares deterministically with itself (PPO ratio, DPO margin,
reward-model scores)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlxf.algorithms import registry
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.preference import DPOConfig
from rlxf.config.train import OptimConfig
from rlxf.data.preference import PreferenceExample
from rlxf.models import load_model
from rlxf.models.value_model import ValueModel, sequence_scores
from rlxf.trainer.dpo import DPOObjective, reference_logprobs
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.reward_model import BradleyTerryObjective
from rlxf.trainer.roles import Actor, Critic, ForwardSpec
from rlxf.types import Experience

B = 6
AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")


def _batch(seed: int = 0):
    """B random prompt/response pairs of different lengths; row 2 has an environment token (mask 0)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, 200, (3 + i % 4,), generator=gen).tolist() for i in range(B)]
    responses = [torch.randint(10, 200, (2 + (i * 3) % 5,), generator=gen).tolist() for i in range(B)]
    width = max(map(len, responses))
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in responses])
    mask[2, 1] = 0.0
    return prompts, responses, mask, gen


def _gradient_of_one_step(role, *update_args):
    """``role.update(*update_args)`` (one optimizer step): the gradient its optimizer step saw
    (AdamW's first step hides a gradient's scale), and what the update returned."""
    seen: dict[str, torch.Tensor] = {}
    step = role._optimizer_step

    def capture(finite):
        seen.update({n: p.grad.detach().clone() for n, p in role.model.named_parameters() if p.grad is not None})
        return step(finite)

    role._optimizer_step = capture
    return seen, role.update(*update_args)


def _assert_same_gradient(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-4 * float(want[name].abs().max()))


def _critic(model_dir, micro_batch_size: int, agg: str) -> Critic:
    torch.manual_seed(0)
    model = ValueModel.from_pretrained(model_dir)
    torch.nn.init.normal_(model.value_head.weight, std=0.1)  # a zero head gives the trunk no gradient
    return Critic(model, OptimConfig(lr=1e-3), 10, ForwardSpec(micro_batch_size=micro_batch_size), 0.2,
                  registry.get("loss_agg", agg), 8.0)


def _critic_experience(critic: Critic) -> Experience:
    prompts, responses, mask, _ = _batch()
    values = critic.values(prompts, responses)
    gen = torch.Generator().manual_seed(1)
    noise = torch.randn(mask.shape, generator=gen)
    returns = (values + 0.5 * noise + torch.arange(B)[:, None]) * mask  # rows differ: V explains little
    return Experience(prompt_ids=prompts, response_ids=responses, mask=mask, rollout_logprobs=torch.zeros_like(mask),
                      old_logprobs=None, advantages=torch.zeros_like(mask), group_ids=torch.arange(B),
                      rewards=torch.zeros(B), values=values + 0.3 * noise.flip(0) * mask, returns=returns)


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_critic_update_and_its_metrics_do_not_depend_on_the_micro_batch_size(nano_model_dir, agg):
    results = {}
    for micro in (B, 3, 1):
        critic = _critic(nano_model_dir, micro, agg)
        exp = _critic_experience(critic)
        results[micro] = _gradient_of_one_step(critic, exp, [list(range(B))])
    grads, metrics = results[B]
    for micro in (3, 1):
        _assert_same_gradient(results[micro][0], grads)
        for key in ("critic/loss", "critic/vf_explained_var", "critic/vf_clipfrac", "critic/value_mean"):
            assert results[micro][1][key] == pytest.approx(metrics[key], rel=1e-4, abs=1e-5), (micro, key)
    # the explained variance of the whole batch, 1 - Var(R - V) / Var(R), not a mix of its parts'
    critic = _critic(nano_model_dir, B, agg)
    exp = _critic_experience(critic)
    with torch.no_grad():
        v = critic.values(exp.prompt_ids, exp.response_ids)
    valid = exp.mask.bool()
    r, d = exp.returns[valid], (exp.returns - v)[valid]
    assert metrics["critic/vf_explained_var"] == pytest.approx(float(1 - d.var() / r.var()), abs=1e-5)


def _actor(model, agg: str, loss: str, micro: int, temperature: float = 1.0) -> Actor:
    algo = AlgorithmConfig(loss_agg=agg, policy_loss=loss, kl_coef=0.1, entropy_coef=0.05, off_policy="tis",
                           is_cap=1.2, clip_eps_low=0.05, clip_eps_high=0.05)
    return Actor(model, PolicyObjective.from_config(algo, max_new_tokens=8), OptimConfig(lr=1e-3), 10,
                 ForwardSpec(micro_batch_size=micro, temperature=temperature), mini_batch_size=B)


def _hf_logprobs(model, prompts, responses, width: int, temperature: float):
    """log π(a_t|s_t) and H(π(·|s_t)), (B, T), by the plain transformers forward of each sequence."""
    logps, entropies = [], []
    for p, r in zip(prompts, responses, strict=True):
        logits = model(torch.tensor([p + r])).logits[0, len(p) - 1:len(p) - 1 + len(r)].float() / temperature
        log_softmax = torch.log_softmax(logits, -1)
        logps.append(torch.nn.functional.pad(log_softmax.gather(-1, torch.tensor(r)[:, None])[:, 0], (0, width - len(r))))
        entropies.append(torch.nn.functional.pad(-(log_softmax.exp() * log_softmax).sum(-1), (0, width - len(r))))
    return torch.stack(logps), torch.stack(entropies)


def _by_hand(loss: str, agg: str, lp, ent, old, rollout, ref, adv, mask):
    """The actor's loss written out: TIS-weighted policy loss + β·KL (k3) - c·H, aggregated by ``agg``."""
    lengths = mask.sum(-1)
    rho = torch.exp(old - rollout).clamp(max=1.2)
    if loss == "gspo":  # s_i,t = sg(s_i) π/sg(π), s_i = exp(mean_t log(π/π_old))
        s = torch.exp(((lp - old) * mask).sum(-1, keepdim=True) / lengths[:, None])
        ratio = s.detach() * torch.exp(lp - lp.detach())
    else:
        ratio = torch.exp(lp - old)
    policy = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.95, 1.05)) * rho
    log_ratio = lp - ref
    k3 = torch.exp(-log_ratio) - 1 + log_ratio
    aggregate = {
        "token_mean": lambda x: (x * mask).sum() / mask.sum(),
        "seq_mean_token_mean": lambda x: ((x * mask).sum(-1) / lengths).mean(),
        "seq_mean_token_sum": lambda x: (x * mask).sum(-1).mean(),
        "seq_mean_token_sum_norm": lambda x: (x * mask).sum(-1).mean() / 8,
    }[agg]
    return aggregate(policy) + 0.1 * aggregate(k3) - 0.05 * aggregate(ent)


@pytest.mark.parametrize(("loss", "agg"), [("gspo", "seq_mean_token_mean"), ("ppo_clip", "token_mean"),
                                           ("ppo_clip", "seq_mean_token_sum_norm"), ("dual_clip", "seq_mean_token_sum")])
def test_actor_gradient_is_the_objective_by_hand_for_any_micro_batch_size(nano_model_dir, loss, agg):
    prompts, responses, mask, gen = _batch()
    temperature = 0.7
    reference = load_model(nano_model_dir)
    with torch.no_grad():
        lp0, _ = _hf_logprobs(reference, prompts, responses, mask.shape[1], temperature)
    old = lp0 + 0.1 * torch.randn(mask.shape, generator=gen) * mask          # some tokens clip
    rollout = old + 0.3 * torch.randn(mask.shape, generator=gen) * mask      # some weights truncate
    ref = lp0 + 0.2 * torch.randn(mask.shape, generator=gen) * mask
    adv = torch.randn(B, 1, generator=gen) * mask
    exp = Experience(prompt_ids=prompts, response_ids=responses, mask=mask, rollout_logprobs=rollout,
                     old_logprobs=old, advantages=adv, group_ids=torch.arange(B), rewards=adv[:, 0], ref_logprobs=ref)
    lp, ent = _hf_logprobs(reference, prompts, responses, mask.shape[1], temperature)
    _by_hand(loss, agg, lp, ent, old, rollout, ref, adv, mask).backward()
    want = {n: p.grad for n, p in reference.named_parameters()}
    for micro in (B, 1):
        actor = _actor(load_model(nano_model_dir), agg, loss, micro, temperature)
        _assert_same_gradient(_gradient_of_one_step(actor, exp, [list(range(B))], 0.1)[0], want)


# -- dropout: a model compared with itself must be deterministic -------------------------------------


def _with_dropout(model_dir):
    """The nano model with attention dropout 0.3 in its architecture (Qwen2's only dropout)."""
    return AutoModelForCausalLM.from_pretrained(model_dir, attention_dropout=0.3)


def test_actor_first_mini_batch_ratio_is_one_on_a_model_with_dropout(nano_model_dir):
    prompts, responses, _, gen = _batch()
    prompts, responses = prompts[:4], [r + [11, 12, 13] for r in responses[:4]]
    algo = AlgorithmConfig(loss_agg="token_mean")
    actor = Actor(_with_dropout(nano_model_dir), PolicyObjective.from_config(algo, max_new_tokens=8),
                  OptimConfig(lr=1e-3), 10, ForwardSpec(micro_batch_size=4), mini_batch_size=2)
    actor.model.train()  # as after any update: π_old is recomputed with the model in training mode
    old = actor.logprobs(prompts, responses)
    torch.testing.assert_close(actor.logprobs(prompts, responses), old, rtol=0, atol=0)
    mask = (old != 0).float()
    exp = Experience(prompt_ids=prompts, response_ids=responses, mask=mask, rollout_logprobs=old, old_logprobs=old,
                     advantages=torch.randn(4, 1, generator=gen) * mask, group_ids=torch.arange(4), rewards=torch.zeros(4))
    metrics, first, _ = actor.update(exp, [[0, 1], [2, 3]], 0.0)
    # no weight has moved before the first mini-batch: r = π_θ/π_old = 1 on every token there
    torch.testing.assert_close(first[:2], old[:2], rtol=0, atol=1e-5)


def _pairs(n: int = 4) -> list[PreferenceExample]:
    gen = torch.Generator().manual_seed(3)

    def ids(k: int) -> list[int]:
        return torch.randint(10, 200, (k,), generator=gen).tolist()

    return [PreferenceExample(uid=str(i), prompt_ids=ids(4 + i % 2), chosen_ids=ids(3 + i % 3),
                              rejected_ids=ids(2 + i % 4), prompt_text="", chosen_text="", rejected_text="")
            for i in range(n)]


def test_dpo_loss_is_log_2_at_the_start_on_a_model_with_dropout(nano_model_dir):
    model = _with_dropout(nano_model_dir)
    pairs = _pairs()
    reference = reference_logprobs(model, pairs, batch_size=2)
    objective = DPOObjective(model, DPOConfig(loss="dpo", batch_size=4, micro_batch_size=4), reference)
    model.train()  # the training forward
    losses, metrics = objective(pairs)
    torch.testing.assert_close(losses, torch.full((4,), math.log(2)), rtol=0, atol=1e-5)
    assert float(metrics["reward_margin"]) == pytest.approx(0.0, abs=1e-5)


def test_reward_model_scores_are_deterministic_on_a_trunk_with_dropout(nano_model_dir):
    model = ValueModel.from_pretrained(nano_model_dir)
    model.trunk = type(model.trunk).from_pretrained(nano_model_dir, attention_dropout=0.3)
    torch.nn.init.normal_(model.value_head.weight, std=1.0)
    BradleyTerryObjective(model, margin=None, eval_batch_size=4)
    model.train()
    pairs = _pairs()
    prompts, chosen = [p.prompt_ids for p in pairs], [p.chosen_ids for p in pairs]
    torch.testing.assert_close(sequence_scores(model, prompts, chosen), sequence_scores(model, prompts, chosen),
                               rtol=0, atol=0)

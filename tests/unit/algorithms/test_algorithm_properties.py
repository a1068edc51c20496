"""Invariants of the algorithms, checked on random batches (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.algorithms import (
    AdvantageParams,
    OffPolicyParams,
    PolicyLossParams,
    dpo_loss,
    dynamic_sampling_keep,
    gae,
    group_mean_std,
    grpo,
    kl_penalty,
    loss_totals,
    masked_mean,
    masked_var,
    masked_whiten,
    maxrl,
    names,
    outcome_token_rewards,
    registry,
    rloo,
    sequence_scores,
    soft_overlong_penalty,
    value_loss,
)

D = torch.float64
FAST = settings(max_examples=40, deadline=None)


@dataclass
class Batch:
    mask: torch.Tensor        # (B, T) 0/1, holes allowed (multi-turn)
    group_ids: torch.Tensor   # (B,) non-contiguous ids
    rewards: torch.Tensor     # (B, T)
    values: torch.Tensor      # (B, T)
    old: torch.Tensor         # (B, T) log π_old
    logp: torch.Tensor        # (B, T) log π_θ, near old
    rollout: torch.Tensor     # (B, T) log π_rollout, near old
    adv: torch.Tensor         # (B, T)


@st.composite
def batches(draw, min_valid: int = 0, equal_length: bool = False) -> Batch:
    b, t = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    if equal_length:
        length = draw(st.integers(1, t))
        mask = torch.zeros(b, t, dtype=D)
        for i in range(b):  # `length` valid tokens per row, anywhere in the row
            mask[i, torch.randperm(t, generator=g)[:length]] = 1
    else:
        mask = (torch.rand(b, t, generator=g, dtype=D) < draw(st.floats(0.1, 1.0))).to(D)
        if min_valid:
            mask[torch.arange(b), torch.randint(0, t, (b,), generator=g)] = 1
    n_groups = draw(st.integers(1, b))
    group_ids = torch.randint(0, n_groups, (b,), generator=g) * 7 + 3
    old = -3 * torch.rand(b, t, generator=g, dtype=D)
    return Batch(
        mask=mask,
        group_ids=group_ids,
        rewards=torch.randn(b, t, generator=g, dtype=D).round(decimals=1),
        values=torch.randn(b, t, generator=g, dtype=D),
        old=old,
        logp=old + 0.5 * torch.randn(b, t, generator=g, dtype=D),
        rollout=old + 0.3 * torch.randn(b, t, generator=g, dtype=D),
        adv=torch.randn(b, t, generator=g, dtype=D),
    )


def garbage_like(x: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """x with every masked entry replaced by junk: huge numbers, inf, -inf and nan."""
    g = torch.Generator().manual_seed(seed)
    junk = torch.tensor([1e30, -1e30, math.inf, -math.inf, math.nan, 1234.5], dtype=x.dtype)
    pick = junk[torch.randint(0, len(junk), x.shape, generator=g)]
    return torch.where(mask.bool(), x, pick)


def first_valid(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's value at its first valid token (rows must have one)."""
    return x.gather(1, mask.argmax(-1, keepdim=True))[:, 0]


@FAST
@given(batches(min_valid=1), st.booleans())
def test_group_advantages_have_zero_mean_per_group(b, norm):
    for fn in (grpo, rloo, maxrl):
        rewards = b.rewards.abs() if fn is maxrl else b.rewards
        adv, _ = fn(rewards, b.mask, b.group_ids, None, AdvantageParams(norm_by_std=norm))
        per_sample = first_valid(adv, b.mask)
        for gid in b.group_ids.unique():
            in_group = b.group_ids == gid
            assert abs(per_sample[in_group].sum().item()) < 1e-9, (fn.__name__, gid)
        # every valid token of a sample carries the same advantage
        assert torch.equal(adv, per_sample[:, None] * b.mask)


@FAST
@given(batches(min_valid=1))
def test_grpo_normalised_groups_have_unit_std(b):
    scores = sequence_scores(b.rewards, b.mask)
    _, std, size = group_mean_std(scores, b.group_ids)
    adv, _ = grpo(b.rewards, b.mask, b.group_ids, None, AdvantageParams(eps=0.0))
    per_sample = first_valid(adv, b.mask)
    for gid in b.group_ids.unique():
        in_group = b.group_ids == gid
        if in_group.sum() > 1 and std[in_group][0] > 1e-6:
            assert abs(per_sample[in_group].std().item() - 1.0) < 1e-9


@FAST
@given(batches())
def test_gae_with_unit_gamma_lambda_is_reward_to_go_minus_values(b):
    params = AdvantageParams(gamma=1.0, gae_lambda=1.0, norm_by_std=False)
    adv, returns = gae(b.rewards, b.mask, b.group_ids, b.values, params)
    # reward-to-go by plain Python: sum of the row's valid rewards from t on
    rows, cols = b.mask.shape
    to_go = torch.zeros(rows, cols, dtype=D)
    for i in range(rows):
        for t in range(cols):
            if b.mask[i, t]:
                to_go[i, t] = sum(b.rewards[i, k].item() for k in range(t, cols) if b.mask[i, k])
    torch.testing.assert_close(adv, (to_go - b.values) * b.mask)
    torch.testing.assert_close(returns, to_go)


@FAST
@given(batches(), st.floats(0.05, 0.5), st.floats(0.05, 0.5))
def test_policy_losses_at_ratio_one_equal_minus_advantage(b, eps_low, eps_high):
    params = PolicyLossParams(clip_eps_low=eps_low, clip_eps_high=eps_high)
    num_tokens, num_seqs = loss_totals(b.mask)
    for name in names("policy_loss"):
        logp = b.old.clone().requires_grad_(True)
        token_loss, m = registry.get("policy_loss", name)(logp, b.old, b.adv, b.mask, params)
        torch.testing.assert_close(token_loss, -b.adv * b.mask, msg=name)
        token_loss.sum().backward()
        torch.testing.assert_close(logp.grad, -b.adv * b.mask, msg=name)  # the REINFORCE gradient
        assert m["clipfrac_low"] == 0 and m["clipfrac_high"] == 0 and abs(m["approx_kl"]) < 1e-12
        for agg_name in names("loss_agg"):
            agg = registry.get("loss_agg", agg_name)
            kw = {"num_tokens": num_tokens, "num_seqs": num_seqs, "norm": 5}
            torch.testing.assert_close(agg(token_loss, b.mask, **kw), agg(-b.adv, b.mask, **kw))


def _outputs_and_grads(fn, tensors: dict[str, torch.Tensor], grad_names: tuple[str, ...]):
    inputs = {k: (v.clone().requires_grad_(True) if k in grad_names else v) for k, v in tensors.items()}
    out = fn(**inputs)
    parts = out if isinstance(out, tuple) else (out,)
    flat = []
    for part in parts:
        flat.extend(part.values() if isinstance(part, dict) else [part])
    total = sum(p.sum() for p in flat if p.requires_grad)
    grads = {}
    if grad_names and isinstance(total, torch.Tensor):
        total.backward()
        grads = {k: inputs[k].grad for k in grad_names}
    return [p.detach() for p in flat], grads


def _assert_mask_invariant(fn, tensors, mask, grad_names, masked_keys, seed):
    clean_out, clean_grads = _outputs_and_grads(fn, tensors, grad_names)
    dirty = {k: (garbage_like(v, mask, seed) if k in masked_keys else v) for k, v in tensors.items()}
    dirty_out, dirty_grads = _outputs_and_grads(fn, dirty, grad_names)
    for a, c in zip(clean_out, dirty_out, strict=True):
        torch.testing.assert_close(a, c, equal_nan=False)
    for k in grad_names:
        torch.testing.assert_close(clean_grads[k], dirty_grads[k])
        assert torch.all(clean_grads[k][~mask.bool()] == 0), k


@FAST
@given(batches(), st.integers(0, 1000))
def test_masked_tokens_never_change_outputs_or_gradients(b, seed):
    base = {"mask": b.mask}
    for name in names("advantage"):
        fn = registry.get("advantage", name)
        rewards = b.rewards.abs() if name == "maxrl" else b.rewards   # maxrl refuses negative returns
        _assert_mask_invariant(
            lambda rewards, values, mask, fn=fn: fn(rewards, mask, b.group_ids, values, AdvantageParams()),
            {**base, "rewards": rewards, "values": b.values}, b.mask, (), {"rewards", "values"}, seed)
    params = PolicyLossParams(clip_eps_low=0.2, clip_eps_high=0.28)
    for name in names("off_policy"):
        fn = registry.get("off_policy", name)
        for level in ("token", "sequence", "geometric"):
            ip = OffPolicyParams(cap=2.0, level=level)
            _assert_mask_invariant(lambda old, rollout, mask, fn=fn, ip=ip: fn(old, rollout, mask, ip),
                                   {**base, "old": b.old, "rollout": b.rollout}, b.mask, (), {"old", "rollout"}, seed)
    for name in names("policy_loss"):
        fn = registry.get("policy_loss", name)
        _assert_mask_invariant(
            lambda logp, old, adv, rollout, mask, fn=fn: fn(logp, old, adv, mask, params, rollout_logprobs=rollout),
            {**base, "logp": b.logp, "old": b.old, "adv": b.adv, "rollout": b.rollout}, b.mask,
            ("logp",), {"logp", "old", "adv", "rollout"}, seed)
    for name in names("loss_agg"):
        fn = registry.get("loss_agg", name)
        _assert_mask_invariant(lambda token_loss, mask, fn=fn: fn(token_loss, mask, norm=7),
                               {**base, "token_loss": b.adv}, b.mask, ("token_loss",), {"token_loss"}, seed)
    for est in ("k1", "k2", "k3"):
        _assert_mask_invariant(lambda logp, ref, mask, est=est: kl_penalty(logp, ref, est, mask=mask),
                               {**base, "logp": b.logp, "ref": b.rollout}, b.mask, ("logp",), {"logp", "ref"}, seed)
    _assert_mask_invariant(lambda v, old, ret, mask: value_loss(v, old, ret, mask, 0.2),
                           {**base, "v": b.values, "old": b.old, "ret": b.rewards}, b.mask, ("v",),
                           {"v", "old", "ret"}, seed)
    for fn in (masked_mean, masked_var, masked_whiten):
        _assert_mask_invariant(lambda x, mask, fn=fn: fn(x, mask), {**base, "x": b.values}, b.mask, (), {"x"}, seed)


@FAST
@given(st.lists(st.floats(-50, 0), min_size=2, max_size=8), st.floats(0.01, 5.0), st.floats(0.0, 0.49))
def test_dpo_is_log_2_when_policy_equals_reference(logps, beta, smoothing):
    half = len(logps) // 2
    chosen = torch.tensor(logps[:half], dtype=D)
    rejected = torch.tensor(logps[half:2 * half], dtype=D)
    for variant, eps in (("sigmoid", 0.0), ("conservative", smoothing)):
        loss, _ = dpo_loss(chosen, rejected, chosen, rejected, beta=beta, variant=variant, label_smoothing=eps)
        torch.testing.assert_close(loss, torch.full_like(loss, math.log(2)))


@FAST
@given(batches(equal_length=True))
def test_aggregations_agree_on_equal_length_sequences(b):
    length = b.mask.sum(-1)[0].item()
    get = lambda name: registry.get("loss_agg", name)  # noqa: E731
    token = get("token_mean")(b.adv, b.mask)
    torch.testing.assert_close(get("seq_mean_token_mean")(b.adv, b.mask), token)
    torch.testing.assert_close(get("seq_mean_token_sum")(b.adv, b.mask) / length, token)
    torch.testing.assert_close(get("seq_mean_token_sum_norm")(b.adv, b.mask, norm=length), token)


@FAST
@given(batches(), st.floats(1.0, 100.0))
def test_token_sum_norm_is_token_sum_over_the_constant(b, norm):
    get = lambda name: registry.get("loss_agg", name)  # noqa: E731
    torch.testing.assert_close(get("seq_mean_token_sum_norm")(b.adv, b.mask, norm=norm),
                               get("seq_mean_token_sum")(b.adv, b.mask) / norm)


@FAST
@given(batches(), st.data())
def test_micro_batches_sum_to_the_mini_batch(b, data):
    rows = b.mask.shape[0]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(rows - 1, 1)), max_size=3))) - {rows})
    bounds = [0, *cuts, rows]
    num_tokens, num_seqs = loss_totals(b.mask)
    for name in names("loss_agg"):
        agg = registry.get("loss_agg", name)
        full = agg(b.adv, b.mask, norm=9)
        parts = sum(agg(b.adv[s:e], b.mask[s:e], num_tokens=num_tokens, num_seqs=num_seqs, norm=9)
                    for s, e in zip(bounds[:-1], bounds[1:], strict=True))
        torch.testing.assert_close(parts, full, msg=name)


@FAST
@given(batches(min_valid=1))
def test_masked_whiten_has_zero_mean_unit_std(b):
    if b.mask.sum() < 2 or masked_var(b.values, b.mask) < 1e-6:
        return
    w = masked_whiten(b.values, b.mask, eps=0.0)
    assert abs(masked_mean(w, b.mask).item()) < 1e-9
    assert abs(masked_var(w, b.mask).item() - 1.0) < 1e-9


@FAST
@given(batches(min_valid=1))
def test_outcome_rewards_round_trip(b):
    scores = b.values[:, 0]
    torch.testing.assert_close(sequence_scores(outcome_token_rewards(scores, b.mask), b.mask), scores)


@FAST
@given(batches())
def test_dynamic_sampling_keeps_exactly_groups_with_spread(b):
    scores = sequence_scores(b.rewards, b.mask)
    _, std, _ = group_mean_std(scores, b.group_ids)
    assert torch.equal(dynamic_sampling_keep(scores, b.group_ids), std > 0)


@FAST
@given(st.integers(1, 64), st.integers(0, 64), st.floats(0.0, 3.0))
def test_overlong_penalty_is_bounded_and_non_increasing(max_len, buffer, penalty):
    buffer = min(buffer, max_len)
    lengths = torch.arange(0, 2 * max_len + 2)
    out = soft_overlong_penalty(lengths, max_len, buffer, penalty)
    assert (out <= 0).all() and (out >= -penalty - 1e-12).all()
    assert (out[1:] <= out[:-1] + 1e-12).all()
    assert (out[lengths <= max_len - buffer] == 0).all()


@FAST
@given(batches())
def test_k2_and_k3_are_non_negative(b):
    assert (kl_penalty(b.logp, b.rollout, "k2") >= 0).all()
    assert (kl_penalty(b.logp, b.rollout, "k3") >= -1e-15).all()

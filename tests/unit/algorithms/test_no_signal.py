"""What "no learning signal" means for the algorithms: the trainer skips an optimizer step
whose gradient is exactly zero, so every policy loss must give exactly zero gradient (not a
rounding residue) when all advantages are zero, whatever the ratios; a loss that declares
``Needs(zero_advantage_rows=False)`` lets the actor skip such rows, so for it a row whose
advantages are zero must add nothing to the loss or its gradient, whatever the other rows hold;
and the fraction of signal-less groups the diagnostics read."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.algorithms import (
    OffPolicyParams,
    PolicyLossParams,
    dynamic_sampling_keep,
    loss_totals,
    names,
    registry,
    zero_variance_fraction,
)

FAST = settings(max_examples=40, deadline=None)


@FAST
@given(st.integers(1, 5), st.integers(1, 6), st.integers(0, 2**31 - 1), st.floats(0.0, 3.0),
       st.sampled_from(names("off_policy")))
def test_zero_advantages_give_exactly_zero_gradient_in_every_policy_loss(b, t, seed, spread, correction):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(b, t, generator=g) < 0.7).float()
    old = -3 * torch.rand(b, t, generator=g)
    rollout = old + 0.3 * torch.randn(b, t, generator=g)
    params = PolicyLossParams()
    # every off-policy correction's weight multiplies the token loss, as the objective does
    weight, _ = registry.get("off_policy", correction)(old, rollout, mask, OffPolicyParams(cap=2.0))
    num_tokens, num_seqs = loss_totals(mask)
    for name in names("policy_loss"):
        logp = (old + spread * torch.randn(b, t, generator=g)).requires_grad_(True)  # ratios far from 1 too
        token_loss, _ = registry.get("policy_loss", name)(logp, old, torch.zeros(b, t), mask, params, rollout)
        token_loss = token_loss * weight
        for agg_name in names("loss_agg"):
            agg = registry.get("loss_agg", agg_name)
            loss = agg(token_loss, mask, num_tokens=num_tokens, num_seqs=num_seqs, norm=5)
            (grad,) = torch.autograd.grad(loss, logp, retain_graph=True)
            assert not grad.ne(0).any(), (name, agg_name, grad)


@FAST
@given(st.integers(2, 6), st.integers(1, 6), st.integers(0, 2**31 - 1), st.floats(0.0, 3.0),
       st.sampled_from(names("off_policy")))
def test_a_zero_advantage_row_adds_nothing_to_a_loss_that_says_so(b, t, seed, spread, correction):
    """Loss and gradient of a batch whose zero-advantage rows were dropped (its totals still
    counting them, as the actor's are) equal those of the whole batch."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(b, t, generator=g) < 0.7).float()
    mask[:, 0] = 1.0
    old = -3 * torch.rand(b, t, generator=g)
    rollout = old + 0.3 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, 1, generator=g).expand(b, t).clone()
    adv[torch.rand(b, generator=g) < 0.5] = 0.0
    adv[0] = 1.0   # one row with signal at least
    keep = adv.ne(0).any(dim=1)
    params = PolicyLossParams()
    weight, _ = registry.get("off_policy", correction)(old, rollout, mask, OffPolicyParams(cap=2.0))
    num_tokens, num_seqs = loss_totals(mask)
    declared = [name for name in names("policy_loss") if not registry.needs("policy_loss", name).zero_advantage_rows]
    assert {"ppo_clip", "dual_clip", "gspo", "cispo", "vanilla"} <= set(declared)
    for name in declared:
        logp = (old + spread * torch.randn(b, t, generator=g)).requires_grad_(True)
        fn = registry.get("policy_loss", name)
        for agg_name in names("loss_agg"):
            agg = registry.get("loss_agg", agg_name)
            totals = dict(num_tokens=num_tokens, num_seqs=num_seqs, norm=5)
            token_loss = fn(logp, old, adv, mask, params, rollout)[0] * weight
            whole_loss = agg(token_loss, mask, **totals)
            (whole,) = torch.autograd.grad(whole_loss, logp)
            part_loss = agg(fn(logp[keep], old[keep], adv[keep], mask[keep], params, rollout[keep])[0] * weight[keep],
                            mask[keep], **totals)
            (part,) = torch.autograd.grad(part_loss, logp)
            # the two sums add the same non-zero terms in another order: equal to fp32 rounding of
            # the terms' size (ratios far from 1 make terms of 1e5 that may nearly cancel)
            scale = float(token_loss.detach().abs().sum())
            assert abs(float(part_loss) - float(whole_loss)) <= 1e-6 * scale + 1e-7, (name, agg_name)
            assert torch.allclose(part, whole, rtol=1e-6, atol=1e-7), (name, agg_name)
            assert not part[~keep].ne(0).any()


def test_zero_variance_fraction_hand_counted():
    # groups 3: (1, 1) equal; 7: (0, 1) differ; 9: (2,) a single sample; 4: (0, 0, 0) equal
    scores = torch.tensor([1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 0.0, 0.0])
    groups = torch.tensor([3, 7, 3, 9, 7, 4, 4, 4])
    assert zero_variance_fraction(scores, groups).item() == 0.75
    assert zero_variance_fraction(torch.zeros(0), torch.zeros(0, dtype=torch.long)).item() == 0.0


@FAST
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), min_size=1, max_size=30))
def test_zero_variance_groups_are_exactly_those_dynamic_sampling_drops(pairs):
    groups = torch.tensor([gid for gid, _ in pairs])
    scores = torch.tensor([float(s) for _, s in pairs])
    kept_groups = set(groups[dynamic_sampling_keep(scores, groups)].tolist())
    n_groups = len(set(groups.tolist()))
    expected = 1 - len(kept_groups) / n_groups
    assert abs(zero_variance_fraction(scores, groups).item() - expected) < 1e-6

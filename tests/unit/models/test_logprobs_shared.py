"""sequence_logprobs with shared prompts: each distinct prompt runs once, results equal padded."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.models import load_model
from rlxf.models.logprobs import (
    can_share_prompts,
    causal_lm_parts,
    packing_isolates,
    prompt_sharing_matches,
    sequence_logprobs,
    shared_prompt_tokens,
)

# two groups of different prompt lengths (the short one's padding must be masked), a prompt
# seen once, a zero-length and a one-token response
PROMPTS = [[1, 50, 60, 70]] * 3 + [[1, 300, 301, 302, 303, 304, 305]] * 3 + [[4]]
RESPONSES = [[11, 12, 13], [14, 15, 16, 17, 18, 19], [2], [20, 21], [], [7, 8, 9, 10], [5, 6]]


@pytest.fixture(scope="module")
def model(nano_model_dir):
    m = load_model(nano_model_dir, device="cpu")
    with torch.no_grad():  # sharpen the near-uniform random init so mistakes show
        for p in m.parameters():
            p.mul_(4.0)
    trunk, _, _ = causal_lm_parts(m)  # probe the fast paths now: the forwards counted below are the real ones
    assert packing_isolates(trunk) and prompt_sharing_matches(trunk)
    return m


def trunk_inputs(model, **kw) -> list[tuple[int, ...]]:
    """Shapes of the input_ids of every trunk forward that sequence_logprobs makes (read at the
    embedding: the head's run of the model's forward replaces the trunk's and embeds nothing)."""
    trunk, _, _ = causal_lm_parts(model)
    shapes = []
    hook = trunk.get_input_embeddings().register_forward_pre_hook(lambda mod, args: shapes.append(tuple(args[0].shape)))
    try:
        with torch.no_grad():
            sequence_logprobs(model, **kw)
    finally:
        hook.remove()
    return shapes


def test_shared_equals_padded(model):
    with torch.no_grad():
        want = sequence_logprobs(model, PROMPTS, RESPONSES, packed=False, with_entropy=True)
        got = sequence_logprobs(model, PROMPTS, RESPONSES, share_prompts=True, with_entropy=True, chunk_size=4)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.entropy, want.entropy, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.mask, want.mask)
    assert (got.logprobs[4] == 0).all() and (got.logprobs[got.mask.bool()] != 0).all()
    assert got.logprobs[0, 0] != got.logprobs[3, 0]  # teeth: rows differ


def test_each_distinct_prompt_runs_once(model):
    # 3 distinct prompts, the longest of 7 tokens; then the 6 non-empty responses, the longest
    # input r[:-1] of 5 tokens
    assert trunk_inputs(model, prompt_ids=PROMPTS, response_ids=RESPONSES, share_prompts=True) == [(3, 7), (6, 5)]


def test_auto_shares_only_when_it_saves_tokens(model):
    group_p, group_r = [[1, 2, 3, 4, 5, 6]] * 4, [[7, 8, 9]] * 4
    # shared: 1 prompt x 6 + 4 x 2 response inputs = 14; packed: 4 x (6 + 3 - 1) = 32
    assert shared_prompt_tokens(group_p, group_r) == (14, 32)
    assert len(trunk_inputs(model, prompt_ids=group_p, response_ids=group_r)) == 2
    # live rows 3, 5, 6 (row 4 is empty): 2 distinct prompts x 7 + 3 x 3; packed 8 + 10 + 2
    assert shared_prompt_tokens(PROMPTS[3:], RESPONSES[3:]) == (2 * 7 + 3 * 3, 8 + 10 + 2)
    distinct_p, distinct_r = [[1, 2], [3, 4], [5, 6]], [[7, 8, 9]] * 3
    assert shared_prompt_tokens(distinct_p, distinct_r) == (3 * 2 + 3 * 2, 3 * 4)  # a tie: not shared
    assert len(trunk_inputs(model, prompt_ids=distinct_p, response_ids=distinct_r)) == 1


def test_no_leak_between_groups(model):
    """Changing one group's prompt and responses leaves the other group's numbers unchanged."""
    with torch.no_grad():
        a = sequence_logprobs(model, [[1, 2, 3]] * 2 + [[1, 9]] * 2, [[5, 6], [5, 7], [7, 8], [7, 9]],
                              share_prompts=True).logprobs
        b = sequence_logprobs(model, [[1, 900, 901, 902, 903]] * 2 + [[1, 9]] * 2, [[905, 906], [5], [7, 8], [7, 9]],
                              share_prompts=True).logprobs
    torch.testing.assert_close(a[2:], b[2:], rtol=1e-5, atol=1e-5)  # other shapes: fp32 rounding only
    assert not torch.allclose(a[0], b[0])


@settings(max_examples=10, deadline=None)
@given(
    groups=st.lists(
        st.tuples(st.lists(st.integers(0, 4095), min_size=1, max_size=6),
                  st.lists(st.lists(st.integers(0, 4095), min_size=0, max_size=5), min_size=1, max_size=3)),
        min_size=1, max_size=4),
)
def test_property_shared_matches_padded(model, groups):
    prompts = [p for p, rs in groups for _ in rs]
    responses = [r for _, rs in groups for r in rs]
    with torch.no_grad():
        want = sequence_logprobs(model, prompts, responses, packed=False, with_entropy=True)
        got = sequence_logprobs(model, prompts, responses, share_prompts=True, with_entropy=True)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.entropy, want.entropy, rtol=1e-5, atol=1e-5)


def _grads(model, **kw):
    model.zero_grad()
    out = sequence_logprobs(model, PROMPTS, RESPONSES, with_entropy=True, **kw)
    (out.logprobs.sum() + 0.1 * out.entropy.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return grads


def test_gradients_reach_the_shared_prompt(model):
    """The prompt runs once but feeds every response: its gradient is the sum over them."""
    want = _grads(model, packed=False)
    got = _grads(model, share_prompts=True)
    for name in want:
        scale = want[name].abs().max().item()
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5 * scale, msg=name)
    assert any(g.abs().sum() > 0 for g in want.values())


def test_activation_checkpointing_falls_back_to_packing(nano_model_dir):
    ckpt = load_model(nano_model_dir, gradient_checkpointing=True)
    ckpt.train()
    trunk, _, _ = causal_lm_parts(ckpt)
    assert not can_share_prompts(trunk)
    with torch.no_grad():  # no backward, so nothing is checkpointed: the cache is usable
        assert can_share_prompts(trunk)
    with pytest.raises(ValueError, match="cannot share prompts"):
        sequence_logprobs(ckpt, PROMPTS, RESPONSES, share_prompts=True)
    out = sequence_logprobs(ckpt, [[1, 2, 3]] * 4, [[4, 5, 6]] * 4)  # auto: packed, still correct
    out.logprobs.sum().backward()
    assert all(p.grad is not None for p in ckpt.parameters() if p.requires_grad)

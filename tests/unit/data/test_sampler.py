"""PromptSampler: seeded order, whole epochs, exact resume."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.data import DataError, PromptSampler
from rlxf.types import Prompt


def prompts(n: int) -> list[Prompt]:
    return [Prompt(uid=f"t:train:{i}", prompt_ids=[1, i], prompt_text=str(i)) for i in range(n)]


def uids(batch):
    return [p.uid for p in batch]


def test_each_epoch_visits_every_prompt_once_in_a_new_order():
    s = PromptSampler(prompts(10), seed=0)
    e0, e1 = uids(s.next_batch(10)), uids(s.next_batch(10))
    assert sorted(e0) == sorted(e1) == sorted(uids(prompts(10)))
    assert e0 != e1 and s.epoch == 1
    assert s.consumed == 20


def test_seeded_order_and_no_shuffle():
    a, b = PromptSampler(prompts(20), seed=5), PromptSampler(prompts(20), seed=5)
    assert uids(a.next_batch(35)) == uids(b.next_batch(35))
    assert uids(PromptSampler(prompts(20), seed=6).next_batch(20)) != uids(PromptSampler(prompts(20), seed=5).next_batch(20))
    assert uids(PromptSampler(prompts(5), seed=5, shuffle=False).next_batch(7)) == \
        [f"t:train:{i}" for i in (0, 1, 2, 3, 4, 0, 1)]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 13), batches=st.lists(st.integers(1, 9), min_size=1, max_size=8),
       cut=st.integers(0, 8), seed=st.integers(0, 99))
def test_property_resume_continues_with_the_next_unseen_prompt(n, batches, cut, seed):
    whole = PromptSampler(prompts(n), seed=seed)
    expected = [uids(whole.next_batch(b)) for b in batches]
    first = PromptSampler(prompts(n), seed=seed)
    cut = min(cut, len(batches))
    got = [uids(first.next_batch(b)) for b in batches[:cut]]
    resumed = PromptSampler(prompts(n), seed=seed)
    resumed.load_state_dict(first.state_dict())
    got += [uids(resumed.next_batch(b)) for b in batches[cut:]]
    assert got == expected


def test_resume_with_different_data_is_refused():
    s = PromptSampler(prompts(10), seed=0)
    s.next_batch(3)
    other = PromptSampler(prompts(11), seed=0)
    with pytest.raises(DataError, match="num_prompts, fingerprint differ"):
        other.load_state_dict(s.state_dict())
    changed = prompts(10)
    changed[4] = Prompt(uid="t:train:4", prompt_ids=[1, 99], prompt_text="4")  # same uid, new tokens
    with pytest.raises(DataError, match="fingerprint"):
        PromptSampler(changed, seed=0).load_state_dict(s.state_dict())


def test_empty_prompts_are_an_error():
    with pytest.raises(DataError, match="no prompts"):
        PromptSampler([], seed=0)


def test_resume_with_pairs_swapped_or_relabelled_is_refused():
    """The same prompts with chosen and rejected swapped (or an SFT answer changed) are other data."""
    from rlxf.data.preference import PreferenceExample

    def pairs(swap: int | None = None) -> list[PreferenceExample]:
        out = []
        for i in range(6):
            good, bad = [10 + i, 2], [20 + i, 2]
            if i == swap:
                good, bad = bad, good
            out.append(PreferenceExample(uid=f"p:{i}", prompt_ids=[1, i], chosen_ids=good, rejected_ids=bad,
                                         prompt_text=str(i), chosen_text="a", rejected_text="b"))
        return out

    s = PromptSampler(pairs(), seed=0)
    s.next_batch(2)
    PromptSampler(pairs(), seed=0).load_state_dict(s.state_dict())   # the same pairs: resumes
    with pytest.raises(DataError, match="fingerprint"):
        PromptSampler(pairs(swap=3), seed=0).load_state_dict(s.state_dict())

"""A curriculum over a mixture: a skipped prompt is replaced from its own source, so the
weights hold for the prompts trained on, and a source with nothing left to keep says so."""

from __future__ import annotations

import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.config.data import CurriculumConfig
from rlxf.data.curriculum import Curriculum
from rlxf.data.sampler import MixtureSampler, mixture_counts
from rlxf.types import Prompt, Trajectory, source_of

NAMES = "abcd"


def _prompts(source: str, n: int) -> list[Prompt]:
    return [Prompt(f"{source}:train:{i}", [i], f"{source} {i}") for i in range(n)]


def _unsolved(prompts: list[Prompt]) -> list[Trajectory]:
    """One all-wrong group (rewards equal) per prompt: the curriculum flags each as unsolved."""
    return [Trajectory(prompt=p, group=g, response_ids=[1], response_text="", rollout_logprobs=[0.0],
                       loss_mask=[1], policy_versions=[0], finish_reason="stop", correct=False, reward=0.0)
            for g, p in enumerate(prompts)]


def _counts(prompts: list[Prompt], names: str) -> list[int]:
    return [sum(source_of(p.uid) == name for p in prompts) for name in names]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), m=st.integers(2, 4), seed=st.integers(0, 3))
def test_trained_shares_follow_the_weights_when_the_curriculum_skips(data, m, seed):
    names = NAMES[:m]
    weights = data.draw(st.lists(st.integers(1, 5), min_size=m, max_size=m))
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=m, max_size=m))
    prompts = {name: _prompts(name, k) for name, k in zip(names, sizes)}
    # any subset of each source flagged, a whole source included (it is then exhausted)
    flagged = [p for name in names for p in prompts[name] if data.draw(st.booleans())]
    sampler = MixtureSampler([p for ps in prompts.values() for p in ps], dict(zip(names, weights)), seed)
    cur = Curriculum(CurriculumConfig(skip_unsolved=True, window=1), seed=seed, num_prompts=sum(sizes))
    cur.observe(_unsolved(flagged))
    taken = 0
    trained = [0] * m
    for batch in data.draw(st.lists(st.integers(1, 8), min_size=1, max_size=5)):
        got = _counts(cur.draw(sampler, batch), names)
        # each batch holds exactly the mixture's own counts for these slots, skips or not
        before, after = mixture_counts(weights, taken), mixture_counts(weights, taken + batch)
        assert got == [y - x for x, y in zip(before, after)]
        taken += batch
        trained = [c + g for c, g in zip(trained, got)]
        assert all(abs(c - taken * w / sum(weights)) < 1 for c, w in zip(trained, weights))
        metrics = cur.step_metrics()
        assert [metrics[f"curriculum/{name}/share"] for name in names] == [g / batch for g in got]


def test_skipped_prompt_is_replaced_from_its_own_source():
    """1:1, a's prompts 0-7 flagged: each of a's 8 slots of 16 skips a:0..a:7 (unshuffled) to reach
    a:8 or a:9, so a keeps its 8 (it had 2 of 16 when replacements came from either source)."""
    a, b = _prompts("a", 10), _prompts("b", 10)
    sampler = MixtureSampler(a + b, {"a": 1, "b": 1}, seed=0, shuffle=False)
    cur = Curriculum(CurriculumConfig(skip_unsolved=True, window=1), seed=0, num_prompts=20)
    cur.observe(_unsolved(a[:8]))
    drawn = cur.draw(sampler, 16)
    assert [p.uid for p in drawn if source_of(p.uid) == "a"] == ["a:train:8", "a:train:9"] * 4
    assert [p.uid for p in drawn if source_of(p.uid) == "b"] == [p.uid for p in b[:8]]
    assert cur.step_metrics() == {
        "curriculum/skipped_solved": 0.0, "curriculum/skipped_unsolved": 32.0, "curriculum/flagged": 8.0,
        "curriculum/a/share": 0.5, "curriculum/a/skipped": 32.0, "curriculum/b/share": 0.5,
        "curriculum/b/skipped": 0.0}


def test_source_with_every_prompt_flagged_keeps_its_share_and_warns(caplog):
    """a's 3 prompts all flagged: a's first slot skips a:0..a:2 (3 in a row, as many as a has), then
    takes a:0 as exhausted; its next slot is exhausted at once. b is untouched."""
    a, b = _prompts("a", 3), _prompts("b", 3)
    sampler = MixtureSampler(a + b, {"a": 1, "b": 1}, seed=0, shuffle=False)
    cur = Curriculum(CurriculumConfig(skip_unsolved=True, window=1), seed=0, num_prompts=6)
    cur.observe(_unsolved(a))
    with caplog.at_level(logging.WARNING, logger="rlxf.data"):
        drawn = cur.draw(sampler, 4)
    assert [p.uid for p in drawn] == ["a:train:0", "b:train:0", "a:train:1", "b:train:1"]
    metrics = cur.step_metrics()
    assert (metrics["curriculum/exhausted"], metrics["curriculum/a/exhausted"], metrics["curriculum/a/skipped"]) == (
        2.0, 2.0, 3.0)
    assert "curriculum/b/exhausted" not in metrics
    assert "data.sources[a]" in caplog.text and "curriculum/a/exhausted" in caplog.text


def test_resume_mid_mixture_repeats_the_draws():
    a, b = _prompts("a", 5), _prompts("b", 4)
    cfg = CurriculumConfig(skip_unsolved=True, window=1)

    def fresh():
        cur = Curriculum(cfg, seed=1, num_prompts=9)
        cur.observe(_unsolved([a[0], a[1], a[3], b[2]]))
        return MixtureSampler(a + b, {"a": 2, "b": 1}, seed=1), cur

    sampler, cur = fresh()
    cur.draw(sampler, 5)
    saved = sampler.state_dict(), cur.state_dict()
    later = [p.uid for p in cur.draw(sampler, 7)]
    sampler, cur = fresh()
    sampler.load_state_dict(saved[0])
    cur.load_state_dict(saved[1])
    assert [p.uid for p in cur.draw(sampler, 7)] == later

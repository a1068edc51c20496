"""Data mixtures: weighted, resumable sampling; held-out prompts never trained on; per-source
verifiers; the curriculum's skipping and its state."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rlxf.config.data import CurriculumConfig, DataConfig
from rlxf.data import MixtureSampler, build_prompt_data
from rlxf.data.curriculum import Curriculum
from rlxf.data.prompts import content_key
from rlxf.data.sampler import _next_source, mixture_counts
from rlxf.types import Prompt, Trajectory, source_of


def _prompts(source: str, n: int) -> list[Prompt]:
    return [Prompt(uid=f"{source}:train:{i}", prompt_ids=[i, len(source)], prompt_text=f"{source} {i}")
            for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=6), n=st.integers(0, 400))
@example(weights=[87.0, 87.0, 3.5, 3.5, 3.5, 3.375], n=257)  # "furthest behind" fell 1.07 behind at 147
def test_every_prefix_holds_each_share_to_within_one_prompt(weights, n):
    total, m = sum(weights), len(weights)
    bound = 1 - 1 / (2 * m - 2) if m > 1 else 0.0  # Tijdeman's: 1/2 for two sources, 3/4 for three
    counts = [0] * m
    for k in range(n):  # every prefix of the draws
        counts[_next_source(weights, counts, k)] += 1
        assert all(abs(c - (k + 1) * w / total) <= bound + 1e-9 for c, w in zip(counts, weights)), (k + 1, counts)
    assert counts == mixture_counts(weights, n)


def test_two_sources_draw_the_furthest_behind_as_before():
    """Tijdeman's rule is, for two sources, the rule every measured run used (the quickstart's
    and the efficacy benchmark's mixtures): their draws are unchanged."""
    for weights in ([1.0, 0.02], [3.0, 1.0], [0.98, 0.02], [1.0, 1.0]):
        counts = [0, 0]
        for k in range(2000):
            behind = [(k + 1) * w / sum(weights) - c for w, c in zip(weights, counts)]
            furthest = max(range(2), key=lambda i: (behind[i], -i))
            assert _next_source(weights, counts, k) == furthest, (weights, k)
            counts[furthest] += 1


@settings(max_examples=25, deadline=None)
@given(weights=st.lists(st.integers(1, 9), min_size=2, max_size=4), batch=st.integers(1, 20),
       cut=st.integers(0, 6))
def test_mixture_resumes_mid_mixture_exactly(weights, batch, cut):
    names = [f"s{i}" for i in range(len(weights))]
    prompts = [p for i, name in enumerate(names) for p in _prompts(name, 3 + 2 * i)]
    mix = dict(zip(names, map(float, weights)))
    straight = MixtureSampler(prompts, mix, seed=5)
    stream = [p.uid for _ in range(8) for p in straight.next_batch(batch)]
    first = MixtureSampler(prompts, mix, seed=5)
    for _ in range(cut):
        first.next_batch(batch)
    resumed = MixtureSampler(prompts, mix, seed=5)
    resumed.load_state_dict(first.state_dict())
    rest = [p.uid for _ in range(8 - cut) for p in resumed.next_batch(batch)] if cut <= 8 else []
    assert rest == stream[cut * batch:]
    drawn = [source_of(uid) for uid in stream]
    assert [drawn.count(n) for n in names] == mixture_counts([float(w) for w in weights], len(stream))


def test_a_state_of_another_mixture_is_refused():
    from rlxf.data import DataError

    a = MixtureSampler(_prompts("a", 3) + _prompts("b", 3), {"a": 1.0, "b": 1.0}, seed=0)
    b = MixtureSampler(_prompts("a", 3) + _prompts("b", 3), {"a": 2.0, "b": 1.0}, seed=0)
    with pytest.raises(DataError, match="mixture"):
        b.load_state_dict(a.state_dict())


def test_mixture_config_names_are_checked():
    with pytest.raises(ValidationError, match="names \\['leg_counting'\\] repeat"):
        DataConfig(sources=[{"task": "reasoning_gym:leg_counting"}, {"task": "reasoning_gym:leg_counting"}])
    with pytest.raises(ValidationError, match="may not contain"):
        DataConfig(sources=[{"task": "arithmetic", "name": "a:b"}])
    with pytest.raises(ValidationError, match="move the single source into data.sources"):
        DataConfig(task="arithmetic", sources=[{"task": "arithmetic"}])
    assert DataConfig(sources=[{"task": "reasoning_gym:leg_counting"}]).sources[0].label == "leg_counting"


def test_a_source_of_weight_0_is_evaluated_and_never_trained_on(tokenizer_for_tests):
    """weight 0: the source's held-out prompts are in every eval, none of its prompts is drawn,
    and the others are drawn exactly as without it (the same order, bit for bit)."""
    mixed = MixtureSampler(_prompts("hard", 5) + _prompts("easy", 5), {"hard": 1.0, "easy": 0.0}, seed=3)
    alone = MixtureSampler(_prompts("hard", 5), {"hard": 1.0}, seed=3)
    assert [p.uid for p in mixed.next_batch(12)] == [p.uid for p in alone.next_batch(12)]
    add = {"task": "arithmetic", "task_options": {"max_digits": 2, "ops": "+"}, "train_size": 20, "test_size": 4}
    data = build_prompt_data(DataConfig(sources=[{**add, "name": "trained"}, {**add, "name": "watched", "weight": 0,
                                                                                 "seed": 9}]),
                             tokenizer_for_tests, seed=0)
    assert {source_of(p.uid) for p in data.test} == {"trained", "watched"} and data.weights["watched"] == 0
    with pytest.raises(ValidationError, match="every weight is 0"):
        DataConfig(sources=[{**add, "weight": 0}])


def test_content_key_ignores_spacing_and_unicode_forms():
    assert content_key("What is  2+2?\n") == content_key(" What is 2+2?") == content_key("What is 2＋2?")
    assert content_key("What is 2+3?") != content_key("What is 2+2?")


def test_no_held_out_prompt_is_trained_on_across_overlapping_generator_seeds(tokenizer_for_tests):
    """reasoning-gym item i of seed s is Random(s + i): a source with seed 10 holds out items
    10..39, which the seed-0 source's training stream (items 30..) contains."""
    pytest.importorskip("reasoning_gym")
    cfg = DataConfig(sources=[
        {"task": "reasoning_gym:chain_sum", "name": "a", "seed": 0, "train_size": 60, "test_size": 30},
        {"task": "reasoning_gym:chain_sum", "name": "b", "seed": 10, "train_size": 60, "test_size": 30},
    ], apply_chat_template=False, max_prompt_len=256)
    data = build_prompt_data(cfg, tokenizer_for_tests, seed=0)
    held_out = {content_key(p.prompt_text) for p in data.test}   # no template: the text is the question
    trained = {content_key(p.prompt_text) for p in data.train}
    assert held_out == data.held_out and not trained & held_out
    assert data.report["a/train_removed_held_out"] >= 10 and data.report["train_removed_held_out"] >= 10
    assert {source_of(p.uid) for p in data.train} == {"a", "b"} and data.weights == {"a": 1.0, "b": 1.0}


def test_each_source_is_scored_by_its_own_verifiers():
    from rlxf.config import Config
    from rlxf.rewards import RewardInput, build_run_reward

    cfg = Config.model_validate({
        "model": {"path": "unused"},
        "data": {"sources": [{"task": "arithmetic", "name": "plain"},
                             {"task": "arithmetic", "name": "tagged",
                              "verifiers": [{"type": "format", "name": "tag", "pattern": "^<b>"}]}]},
        "reward": {"verifiers": [{"type": "exact", "name": "exact", "extract": ["full"]}]},
    })
    reward = build_run_reward(cfg)
    try:
        out = reward.score([RewardInput("q", "<b>7", "7", uid="plain:train:0"),
                            RewardInput("q", "<b>7", "7", uid="tagged:train:0"),
                            RewardInput("q", "7", "7", uid="plain:train:1")])
    finally:
        reward.close()
    assert [(s.reward, s.correct, sorted(s.scores)) for s in out] == [
        (0.0, False, ["exact"]), (1.0, True, ["tag"]), (1.0, True, ["exact"])]


def _groups(rates: dict[str, float], n: int = 4) -> list[Trajectory]:
    out = []
    for g, (uid, rate) in enumerate(rates.items()):
        for k in range(n):
            out.append(Trajectory(prompt=Prompt(uid, [1], "x"), group=g, response_ids=[1], response_text="",
                                  rollout_logprobs=[0.0], loss_mask=[1], policy_versions=[0],
                                  finish_reason="stop", correct=k < rate * n, reward=float(k < rate * n)))
    return out


class _Cycle:
    """A sampler over fixed prompts in a fixed order (the curriculum's view of one)."""

    def __init__(self, uids):
        self.uids, self.i = uids, 0

    def next_batch(self, n):
        out = [Prompt(self.uids[(self.i + k) % len(self.uids)], [1], "x") for k in range(n)]
        self.i += n
        return out


def test_curriculum_skips_solved_and_unsolved_prompts_counts_them_and_resumes():
    cfg = CurriculumConfig(skip_solved=True, skip_unsolved=True, window=2)
    cur = Curriculum(cfg, seed=0, num_prompts=4)
    uids = ["t:train:0", "t:train:1", "t:train:2", "t:train:3"]
    for _ in range(2):
        cur.observe(_groups({uids[0]: 1.0, uids[1]: 0.0, uids[2]: 0.5, uids[3]: 1.0}))
    cur.observe(_groups({uids[3]: 0.75}))   # the latest of its 2 groups was not all solved
    assert [cur.verdict(u) for u in uids] == ["solved", "unsolved", None, None]
    sampler = _Cycle(uids)
    assert [p.uid for p in cur.draw(sampler, 4)] == [uids[2], uids[3], uids[2], uids[3]]
    assert cur.step_metrics() == {"curriculum/skipped_solved": 2.0, "curriculum/skipped_unsolved": 2.0,
                                  "curriculum/flagged": 2.0}
    saved, at = cur.state_dict(), sampler.i
    later = [p.uid for p in cur.draw(sampler, 6)]
    again = Curriculum(cfg, seed=0, num_prompts=4)
    again.load_state_dict(saved)
    sampler.i = at
    assert [p.uid for p in again.draw(sampler, 6)] == later


def test_curriculum_flags_only_groups_without_signal():
    """No sample correct, but partial credit that differs: GRPO learns from that group, so its
    prompt is not flagged as unsolved. Samples of a failed episode (no model token, reward 0)
    are not answers: a group of three right answers and one failed episode is solved."""
    cur = Curriculum(CurriculumConfig(skip_solved=True, skip_unsolved=True, window=1), seed=0, num_prompts=4)
    partial, agreeing, with_failed = (_groups({f"t:train:{i}": rate}) for i, rate in enumerate([0.0, 0.0, 1.0]))
    for k, t in enumerate(partial):
        t.reward = 0.1 * k
    with_failed[0].loss_mask, with_failed[0].reward, with_failed[0].correct = [0], 0.0, False
    for trajs in (partial, agreeing, with_failed):
        cur.observe(trajs)
    assert [cur.verdict(f"t:train:{i}") for i in range(3)] == [None, "unsolved", "solved"]


def test_curriculum_takes_flagged_prompts_when_every_prompt_is_flagged():
    cur = Curriculum(CurriculumConfig(skip_unsolved=True, window=1), seed=0, num_prompts=2)
    cur.observe(_groups({"t:train:0": 0.0, "t:train:1": 0.0}))
    assert len(cur.draw(_Cycle(["t:train:0", "t:train:1"]), 3)) == 3
    assert cur.step_metrics()["curriculum/exhausted"] >= 1


def test_curriculum_keep_fraction_down_weights_instead_of_skipping():
    cfg = CurriculumConfig(skip_solved=True, window=1, keep_fraction=0.5)
    cur = Curriculum(cfg, seed=3, num_prompts=1000)
    uids = [f"t:train:{i}" for i in range(200)]
    cur.observe(_groups(dict.fromkeys(uids[:100], 1.0)))
    drawn = cur.draw(_Cycle(uids), 400)
    kept_flagged = sum(int(p.uid.rsplit(":", 1)[1]) < 100 for p in drawn)
    # 100 unflagged + about 50 of the 100 flagged per pass of 200: about 133 of 400 are flagged ones
    assert 100 < kept_flagged < 170

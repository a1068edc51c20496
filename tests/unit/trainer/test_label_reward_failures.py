"""`rlxf label` and failed rewards: a failed sample scores reward.error_score, which says
nothing about the response, so it is never chosen or rejected; too many failures stop the run."""

from __future__ import annotations

import pytest

from rlxf.config.preference import LabelConfig
from rlxf.config.reward import RewardConfig
from rlxf.rollout import SamplingParams
from rlxf.trainer.collect import RewardFailures
from rlxf.trainer.label import best_and_worst, label_prompts
from rlxf.types import Prompt, Trajectory

# per prompt, its k=4 responses; a response holding "q" makes the judge fail (scored 0.0)
RESPONSES = [
    ["good", "q-timeout", "bad", "mid"],   # the failed one would have been the rejected
    ["low", "high", "q1", "q2"],           # real scores < 0: a failed one would have been the chosen
    ["only", "q1", "q2", "q3"],            # one scored sample: no pair
]
SCORES = {"good": 0.9, "mid": 0.5, "bad": 0.2, "low": -0.5, "high": -0.1, "only": 0.3}


class FakeRollout:
    """``Rollout`` over the table above: samples are its responses, the reward its scores."""

    def __init__(self):
        self.batches: list[list[str]] = []

    def generate(self, prompts, seeds, sampling, *, first_group=0):
        self.batches.append([p.uid for p in prompts])
        return [Trajectory(p, first_group + g, [1], text, [0.0], [1], [0], "stop")
                for g, p in enumerate(prompts) for text in RESPONSES[int(p.uid)][: sampling.n]]

    def score(self, trajs, max_new_tokens):
        for t in trajs:
            if "q" in t.response_text:
                t.reward, t.reward_error = 0.0, f"judge: error: TimeoutError: judge timed out on {t.response_text!r}"
            else:
                t.reward = SCORES[t.response_text]
        return {}


def _prompts(n: int = 3) -> list[Prompt]:
    return [Prompt(str(i), [1, 2], f"prompt {i}") for i in range(n)]


def _label(reward: RewardConfig, batch_prompts: int = 32, **kw):
    return label_prompts(FakeRollout(), _prompts(), SamplingParams(max_new_tokens=4),
                         LabelConfig(k=4, batch_prompts=batch_prompts), seed=0, reward=reward, **kw)


def test_failed_samples_are_never_chosen_or_rejected_and_are_counted():
    pairs, counts = _label(RewardConfig(max_error_frac_first_step=1.0))
    assert [(p["uid"], p["chosen"], p["rejected"]) for p in pairs] == [("0", "good", "bad"), ("1", "high", "low")]
    assert [(p["chosen_score"], p["rejected_score"]) for p in pairs] == [(0.9, 0.2), (-0.1, -0.5)]
    assert counts == {"prompts": 3.0, "pairs": 2.0, "ties": 0.0, "unscored": 1.0, "truncated_unpaired": 0.0,
                      "reward_failed": 6.0, "truncated": 0.0, "gap_mean": pytest.approx((0.7 + 0.4) / 2)}


def test_best_and_worst_needs_two_scored_samples():
    p = Prompt("0", [1], "p")
    ok, failed = (Trajectory(p, 0, [1], s, [0.0], [1], [0], "stop", reward=1.0) for s in ("a", "b"))
    failed.reward_error = "judge: error: boom"
    assert best_and_worst([ok, failed]) is None
    assert best_and_worst([failed, ok, ok]) == (ok, ok)


def test_a_reward_that_fails_in_the_first_batch_stops_with_its_error():
    # default reward.max_error_frac_first_step=0: any failure in the run's first batch stops it
    with pytest.raises(RewardFailures) as e:
        _label(RewardConfig())
    msg = str(e.value)
    assert "rlxf label, train prompts 0-2: the reward failed on 6 of 12 samples" in msg
    assert "reward.max_error_frac_first_step=0" in msg
    assert "judge timed out on 'q-timeout'" in msg          # the first failure, as the verifier reported it
    assert "left out of the pairs" in msg


def test_later_batches_are_held_to_max_error_frac():
    reward = RewardConfig(max_error_frac_first_step=1.0, max_error_frac=0.5)
    # one prompt a batch: 1/4 then 2/4 failed pass (not more than half), 3/4 stops
    with pytest.raises(RewardFailures, match=r"train prompts 2-2: the reward failed on 3 of 4 samples, more than "
                                             r"reward\.max_error_frac=0\.5"):
        _label(reward, batch_prompts=1)
    # not the run's first batch (the held-out split): the first batch gets max_error_frac too
    with pytest.raises(RewardFailures, match=r"test prompts 1-1: .* reward\.max_error_frac=0\.25"):
        _label(RewardConfig(max_error_frac=0.25, max_error_frac_first_step=0.0), batch_prompts=1,
               run_start=False, split="test")

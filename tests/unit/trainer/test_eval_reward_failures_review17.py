"""Held-out evaluation with a reward that fails: said, not read as an accuracy of 0."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlxf.config.reward import RewardConfig
from rlxf.rollout import SamplingParams
from rlxf.run_dir import RunDir
from rlxf.trainer.collect import RewardFailures
from rlxf.trainer.evaluate import evaluate_rollout
from rlxf.trainer.loop import train
from rlxf.types import Prompt, Trajectory

sys.path.insert(0, str(Path(__file__).parent))
from test_loop_lifecycle_review import FallingAccuracy, _config  # noqa: E402


class FailingOn:
    """Every greedy answer right, except that the reward raises on the prompts in ``failing``."""

    def __init__(self, failing: set[int]):
        self.failing = failing

    def generate(self, prompts, seeds, sampling, first_group: int = 0):
        return [Trajectory(prompt=p, group=i, response_ids=[1], response_text="1", rollout_logprobs=[0.0],
                           loss_mask=[1], policy_versions=[0], finish_reason="stop")
                for i, p in enumerate(prompts) for _ in range(sampling.n)]

    def score(self, trajs, max_new_tokens):
        for t in trajs:
            if t.group in self.failing:
                t.reward, t.correct, t.reward_error = 0.0, None, "ValueError: cannot parse the answer '1/2'"
            else:
                t.reward, t.correct = 1.0, True
        return {}


PROMPTS = [Prompt(uid=f"test:{i}", prompt_ids=[1], prompt_text="") for i in range(4)]


def test_a_reward_failing_on_every_held_out_sample_stops_the_evaluation():
    """It reported eval/accuracy 0.0, step after step, with the exceptions nowhere to be seen."""
    with pytest.raises(RewardFailures, match=r"(?s)held-out evaluation \(greedy samples\): the reward failed on 4 of 4 "
                                             r"samples.*cannot parse the answer"):
        evaluate_rollout(FailingOn({0, 1, 2, 3}), PROMPTS, SamplingParams(n=1, max_new_tokens=4))


def test_failures_within_the_limit_count_as_wrong_and_are_reported():
    out = evaluate_rollout(FailingOn({2}), PROMPTS, SamplingParams(n=1, temperature=1.0, max_new_tokens=4), pass_k=2)
    # greedy: 3 of 4 right; pass@2: the same 3 problems; 1 of 4 greedy and 2 of 8 sampled failed
    assert out["eval/accuracy"] == 0.75 and out["eval/pass@k"] == 0.75
    assert out["eval/reward_error_frac"] == 3 / 12
    with pytest.raises(RewardFailures, match=r"reward.max_error_frac=0.2 allows"):
        evaluate_rollout(FailingOn({2}), PROMPTS, SamplingParams(n=1, max_new_tokens=4),
                         reward_cfg=RewardConfig(max_error_frac=0.2))
    assert "eval/reward_error_frac" not in evaluate_rollout(FailingOn(set()), PROMPTS, SamplingParams(max_new_tokens=4))


class HeldOutFails(FallingAccuracy):
    """Training rewards score; every held-out (greedy) sample's reward raises."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self.updates = 0

    def score(self, trajs, max_new_tokens):
        super().score(trajs, max_new_tokens)
        for t in trajs:
            if t.prompt.uid.split(":")[-2] == "test":
                t.reward_error = "KeyError: 'answer'"
        return {}

    def update(self, exp, step):
        self.updates += 1
        return super().update(exp, step)


def test_the_start_evaluation_stops_the_run_before_any_training(tmp_path, tokenizer_for_tests):
    cfg = _config(tmp_path, 2)
    fake = HeldOutFails(tokenizer_for_tests)
    with pytest.raises(RewardFailures, match="held-out evaluation"):
        train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), fake)
    assert fake.updates == 0

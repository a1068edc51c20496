"""The reward error budget (issue 17 item 2): a step with too many failed rewards stops the run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlxf.config.reward import RewardConfig
from rlxf.trainer.collect import RewardFailures, check_reward_failures
from rlxf.types import Prompt, Trajectory


def _trajs(n: int, failed: int) -> list[Trajectory]:
    prompt = Prompt(uid="task:train:7", prompt_ids=[1], prompt_text="1+1=")
    return [Trajectory(prompt=prompt, group=0, response_ids=[2], response_text="2", rollout_logprobs=[-0.1],
                       loss_mask=[1], policy_versions=[0], finish_reason="stop",
                       reward_error=f"correct: error: ZeroDivisionError #{i}" if i < failed else None)
            for i in range(n)]


def test_first_step_is_strict_by_default():
    with pytest.raises(RewardFailures) as e:
        check_reward_failures(_trajs(8, 1), step=1, reward=RewardConfig())
    msg = str(e.value)
    assert "1 of 8 samples" in msg and "reward.max_error_frac_first_step=0" in msg
    assert "prompt task:train:7" in msg and "ZeroDivisionError #0" in msg  # the first failure, shown
    check_reward_failures(_trajs(8, 0), step=1, reward=RewardConfig())     # no failure: no stop


def test_later_steps_allow_up_to_max_error_frac():
    cfg = RewardConfig(max_error_frac=0.5)
    check_reward_failures(_trajs(8, 4), step=2, reward=cfg)                # 4/8 = 0.5: allowed
    with pytest.raises(RewardFailures, match=r"5 of 8 samples, more than reward.max_error_frac=0.5"):
        check_reward_failures(_trajs(8, 5), step=2, reward=cfg)


@given(n=st.integers(1, 40), data=st.data(), step=st.integers(1, 5),
       limit=st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]))
def test_stops_exactly_when_the_failed_fraction_exceeds_the_limit(n, data, step, limit):
    failed = data.draw(st.integers(0, n))
    cfg = RewardConfig(max_error_frac=limit, max_error_frac_first_step=limit)
    if failed / n > limit:
        with pytest.raises(RewardFailures):
            check_reward_failures(_trajs(n, failed), step=step, reward=cfg)
    else:
        check_reward_failures(_trajs(n, failed), step=step, reward=cfg)


def test_dynamic_sampling_stops_in_the_round_whose_rewards_failed():
    """A reward that fails every sample stopped the step only after every one of
    algorithm.max_sampling_rounds rounds was generated and scored (its groups all agree)."""
    from rlxf.config.algorithm import AlgorithmConfig
    from rlxf.rollout import SamplingParams
    from rlxf.trainer.collect import collect
    from rlxf.trainer.timer import PhaseTimer

    class Rollout:
        rounds = 0

        def generate(self, prompts, seeds, sampling, first_group=0):
            self.rounds += 1
            return [t for i in range(len(prompts)) for t in _trajs(sampling.n, sampling.n)]

        def score(self, trajs, max_new_tokens):
            return {"reward/correct_errors": float(len(trajs))}

    class Sampler:
        def next_batch(self, n):
            return [Prompt(uid=f"p{i}", prompt_ids=[1], prompt_text="1+1=") for i in range(n)]

    rollout = Rollout()
    with pytest.raises(RewardFailures, match="8 of 8 samples"):
        collect(rollout, Sampler(), SamplingParams(n=4, max_new_tokens=4),
                AlgorithmConfig(dynamic_sampling=True, max_sampling_rounds=5), prompts_per_step=2, seed=0, step=3,
                timer=PhaseTimer(), reward=RewardConfig(max_error_frac=0.5))
    assert rollout.rounds == 1


def test_a_step_without_signal_trains_on_whole_groups_when_a_round_draws_fewer_prompts():
    """Every group agreed in every round: the step's batch is the last `prompts_per_step` groups,
    each whole, whatever each round drew (the curriculum skipped a prompt) and however many
    samples a group came back with (an engine adapter returned one short): the last need x n
    samples began inside a group of the round before."""
    from rlxf.config.algorithm import AlgorithmConfig
    from rlxf.rollout import SamplingParams
    from rlxf.trainer.collect import collect
    from rlxf.trainer.timer import PhaseTimer

    class Rollout:
        def generate(self, prompts, seeds, sampling, first_group=0):
            trajs = [Trajectory(prompt=p, group=first_group + g, response_ids=[2], response_text="2",
                                rollout_logprobs=[-0.1], loss_mask=[1], policy_versions=[0], finish_reason="stop",
                                reward=1.0) for g, p in enumerate(prompts) for _ in range(sampling.n)]
            return trajs[:-1] if first_group else trajs   # the second round's last group one short

        def score(self, trajs, max_new_tokens):
            return {}

    class Curriculum:
        rounds = 0

        def draw(self, sampler, n):   # the second round skips one prompt as too easy
            self.rounds += 1
            return [Prompt(uid=f"r{self.rounds}p{i}", prompt_ids=[1], prompt_text="1+1=")
                    for i in range(n - (self.rounds > 1))]

        def observe(self, trajs):
            pass

        def step_metrics(self):
            return {}

    kept, _ = collect(Rollout(), None, SamplingParams(n=4, max_new_tokens=4),
                      AlgorithmConfig(dynamic_sampling=True, max_sampling_rounds=2), prompts_per_step=3, seed=0,
                      step=1, timer=PhaseTimer(), curriculum=Curriculum())
    sizes = {}
    for t in kept:
        sizes[t.group] = sizes.get(t.group, 0) + 1
    assert sizes == {2: 4, 3: 4, 4: 3}   # round 1's last group and round 2's two, each whole

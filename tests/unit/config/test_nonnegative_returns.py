"""An advantage estimator that needs every return >= 0 (maxrl divides by the group's mean return)
says so where it is registered, ``Needs(nonnegative_returns=True)``, and config loading asks the
registry: a plugin with that need, under any name, is checked as maxrl is."""

from __future__ import annotations

import pytest
from test_negative_rewards import BASE  # the smallest config that loads

from rlxf.algorithms import registry
from rlxf.algorithms.advantages import maxrl
from rlxf.algorithms.registry import Needs, register
from rlxf.config import ConfigError, load_config
from rlxf.config.algorithm import AlgorithmConfig


@pytest.fixture
def cfg_path(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(BASE)
    return str(path)


def test_maxrl_alone_of_the_builtins_needs_nonnegative_returns():
    needing = [
        name for name in registry.names("advantage") if registry.needs("advantage", name).nonnegative_returns
    ]
    assert needing == ["maxrl"]


def test_each_setting_that_subtracts_from_returns_is_named():
    assert AlgorithmConfig(kl_coef=0.01).negative_return_problems() == []  # the KL in the loss
    kl = AlgorithmConfig(advantage="mine", kl_coef=0.01, kl_mode="reward").negative_return_problems()
    assert [loc for loc, _ in kl] == [("algorithm", "kl_mode")]
    assert "algorithm.advantage='mine'" in kl[0][1] and "use kl_mode: loss" in kl[0][1]
    overlong = AlgorithmConfig(name="dapo").negative_return_problems()  # the preset's overlong_buffer 0.25
    assert [loc for loc, _ in overlong] == [("algorithm", "overlong_buffer")]
    assert AlgorithmConfig(name="dapo", overlong_penalty=0).negative_return_problems() == []


def test_a_plugin_that_needs_nonnegative_returns_is_checked_at_load(cfg_path):
    @register("advantage", "pass_rate_for_tests", needs=Needs(groups=True, nonnegative_returns=True))
    def pass_rate(rewards, mask, group_ids, values, params):
        return maxrl(rewards, mask, group_ids, values, params)

    kl_in_reward = ["algorithm.kl_coef=0.01", "algorithm.kl_mode=reward"]
    with pytest.raises(ConfigError) as e:
        load_config(cfg_path, ["algorithm.advantage=pass_rate_for_tests", *kl_in_reward])
    msg = str(e.value)
    assert "algorithm.kl_mode" in msg and "'pass_rate_for_tests' needs every sample's return >= 0" in msg
    with pytest.raises(ConfigError, match="overlong_buffer: 0"):
        load_config(cfg_path, ["algorithm.name=dapo", "algorithm.advantage=pass_rate_for_tests"])
    # an estimator without that need takes the KL penalty in its rewards
    assert load_config(cfg_path, ["algorithm.advantage=grpo", *kl_in_reward]).algorithm.kl_mode == "reward"

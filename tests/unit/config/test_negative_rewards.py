"""An estimator that needs every return >= 0 (maxrl) is refused at load when the config alone
says the reward ``r = Σ_i w_i · s_i`` can be negative: an overlong verifier, a negative weight,
a negative reward.error_score, a reward model's signed scores. A custom function's scores are
not known and not refused. And a value a preset gave (algorithm.name: dapo's overlong_buffer) is
blamed on the field that chose the preset."""

from __future__ import annotations

import sys

import pytest

from rlxf.config import ConfigError, load_config
from rlxf.config.reward import RewardConfig

BASE = """\
model:
  path: models/tiny
data:
  task: arithmetic
rollout:
  n: 4
train:
  prompts_per_step: 8
  micro_batch_size: 4
"""
MAXRL = "algorithm.advantage=maxrl"
WHY = "maxrl needs it"


@pytest.fixture
def write(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading appends the config's directory

    def write(extra: str = "") -> str:
        path = tmp_path / "run.yaml"
        path.write_text(BASE + extra)
        return str(path)

    return write


def _problems(**reward):
    return RewardConfig(**reward).negative_reward_problems(WHY)


def _refused(path, *overrides) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path, [MAXRL, *overrides])
    return str(e.value)


# ---- the lowest reward, by hand ----------------------------------------------------------

def test_each_cause_is_named_with_the_lowest_reward():
    # math [0, 1] x 1 + overlong [-0.5, 0] x 1: lowest 0 - 0.5 = -0.5
    [(at, msg)] = _problems(verifiers=[{"type": "math"}, {"type": "overlong", "penalty": 0.5}])
    assert at == ("reward", "verifiers", 1)
    assert msg.startswith(f"{WHY}, and reward.verifiers.1 (overlong) scores down to -0.5")
    assert "as low as -0.5" in msg and "algorithm.mask_truncated" in msg
    # math [0, 1] x 1 + format [0, 1] x -0.25: lowest 0 - 0.25 = -0.25
    [(at, msg)] = _problems(verifiers=[{"type": "math"}, {"type": "format", "pattern": "x", "weight": -0.25}])
    assert at == ("reward", "verifiers", 1, "weight") and "as low as -0.25: give it a weight >= 0" in msg
    # math x 2 failing: 2 x error_score -1 = -2
    [(at, msg)] = _problems(verifiers=[{"type": "math", "weight": 2}], error_score=-1)
    assert at == ("reward", "error_score") and "adds -2 in math (weight 2)" in msg and "as low as -2" in msg
    # a reward model's standardised score is unbounded below
    [(at, msg)] = _problems(verifiers=[{"type": "reward_model", "path": "rm", "normalize": "standard"}])
    assert at == ("reward", "verifiers", 0, "normalize") and "as low as -inf" in msg


def test_a_sum_that_cannot_go_below_zero_passes():
    rm = {"type": "reward_model", "path": "rm", "clip": [0.25, 1.0], "weight": 2}
    # 2 x 0.25 (the clipped reward model at its lowest, and failed) - 0.5 (the overlong penalty) = 0
    assert _problems(verifiers=[rm, {"type": "overlong", "penalty": 0.5}], error_score=0.25) == []
    # ... with a penalty of 0.75 the sum reaches 0.5 - 0.75 = -0.25
    [(at, msg)] = _problems(verifiers=[rm, {"type": "overlong", "penalty": 0.75}], error_score=0.25)
    assert at == ("reward", "verifiers", 1) and "as low as -0.25" in msg
    # ... and a reward model that fails with error_score 0 pays for nothing: 0 - 0.5
    [(_, msg)] = _problems(verifiers=[rm, {"type": "overlong", "penalty": 0.5}])
    assert "as low as -0.5" in msg
    # an overlong penalty weighted -1 scores in [0, 1]; a sigmoid reward model in (0, 1)
    assert _problems(verifiers=[{"type": "overlong", "weight": -1}]) == []
    assert _problems(verifiers=[{"type": "reward_model", "path": "rm", "normalize": "sigmoid"}]) == []
    # a weight of 0 counts nothing, even of a failure's negative error_score
    assert _problems(verifiers=[{"type": "math"}, {"type": "overlong", "weight": 0}]) == []
    assert _problems(verifiers=[{"type": "math", "weight": 0}], error_score=-1) == []


def test_a_custom_function_is_neither_blamed_nor_credited():
    custom = {"type": "custom", "function": "my_rewards:score"}
    assert _problems(verifiers=[{**custom, "weight": -1}]) == []   # its scores are its own
    [(at, _)] = _problems(verifiers=[custom, {"type": "overlong"}])   # it counts 0: 0 - 1 = -1
    assert at == ("reward", "verifiers", 1)
    [(at, msg)] = _problems(verifiers=[{**custom, "weight": 0.5}], error_score=-1)   # but it may fail
    assert at == ("reward", "error_score") and "as low as -0.5" in msg


# ---- at load ------------------------------------------------------------------------------

def test_load_refuses_an_overlong_verifier_naming_its_line_and_the_override(write):
    path = write("reward:\n  verifiers:\n    - type: math\n    - type: overlong\n      penalty: 0.5\n")
    msg = _refused(path)
    # the entry's line (13: `- type: overlong`) and the override that chose maxrl
    assert f"reward.verifiers.1 (override '{MAXRL}', {path}:13): algorithm.advantage='maxrl' needs every " \
           f"sample's return >= 0, and reward.verifiers.1 (overlong) scores down to -0.5" in msg
    # an estimator without that need takes it
    assert load_config(path, ["algorithm.advantage=grpo"]).reward.verifiers[1].type == "overlong"


def test_load_refuses_a_negative_weight_and_error_score(write):
    path = write()
    msg = _refused(path, "reward.verifiers=[{type: math}, {type: format, required_tags: [answer], weight: -0.1}]")
    assert "reward.verifiers.1.weight (override 'reward.verifiers=" in msg and "as low as -0.1" in msg
    msg = _refused(path, "reward.error_score=-1")
    assert "reward.error_score (override 'reward.error_score=-1')" in msg and "set reward.error_score: 0" in msg


def test_load_leaves_rewards_it_does_not_compute(write):
    path = write()
    overlong = "reward.verifiers=[{type: math}, {type: overlong}]"
    # a reward server's verifiers are its own
    assert load_config(path, [MAXRL, overlong, "reward.url=http://127.0.0.1:8008"]).reward.url
    # an environment's rewards make the returns unless it also scores with the verifiers
    env = "env={name: guess_number}"
    assert load_config(path, [MAXRL, overlong, env]).env is not None
    assert "reward.verifiers.1" in _refused(path, overlong, "env={name: guess_number, use_verifiers: true}")


# ---- a preset's value points at the preset ---------------------------------------------------

def test_the_dapo_overlong_buffer_is_blamed_on_algorithm_name(write):
    path = write("algorithm:\n  name: dapo\n")
    msg = _refused(path)
    assert f"algorithm.overlong_buffer (override '{MAXRL}', {path}:11)" in msg   # line 11: `name: dapo`
    assert "(algorithm.overlong_buffer=0.25, algorithm.name: dapo's value)" in msg
    msg = _refused(write(), "algorithm.name=dapo")
    assert f"algorithm.overlong_buffer (override '{MAXRL}', override 'algorithm.name=dapo')" in msg
    # set by the user, it is theirs
    path = write("algorithm:\n  name: dapo\n  overlong_buffer: 0.5\n")
    msg = _refused(path)
    assert f"algorithm.overlong_buffer (override '{MAXRL}', {path}:12)" in msg and "as algorithm.name" not in msg


def test_a_schema_error_about_a_preset_value_names_what_chose_it(write):
    # the dapo preset's overlong_buffer 0.25 of 3 tokens is less than one
    path = write("algorithm:\n  name: dapo\n")
    with pytest.raises(ConfigError, match=rf"\(override 'rollout.max_new_tokens=3', {path}:11\)"):
        load_config(path, ["rollout.max_new_tokens=3"])
    # off_policy: tis gives is_cap 2.0
    with pytest.raises(ConfigError, match=r"\(override 'algorithm.is_floor=5', override 'algorithm.off_policy=tis'\)"):
        load_config(write(), ["algorithm.off_policy=tis", "algorithm.is_floor=5"])

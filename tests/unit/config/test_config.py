"""Config loading: YAML + dotted overrides, presets, validation errors users can act on."""

from __future__ import annotations

import textwrap

import pydantic
import pytest

from rlxf.config import Config, ConfigError, dump_config, load_config, parse_override

BASE = """\
run:
  name: demo
  seed: 3
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


@pytest.fixture
def cfg_file(tmp_path):
    def write(text: str = BASE) -> str:
        p = tmp_path / "run.yaml"
        p.write_text(textwrap.dedent(text))
        return str(p)
    return write


def test_yaml_and_overrides(cfg_file):
    cfg = load_config(cfg_file(), ["rollout.n=8", "algorithm.kl_coef=0.01", "rollout.stop_strings=[a, b]"])
    assert cfg.run.name == "demo" and cfg.run.seed == 3
    assert cfg.rollout.n == 8
    assert cfg.algorithm.kl_coef == 0.01
    assert cfg.rollout.stop_strings == ["a", "b"]
    assert cfg.model.path == "models/tiny"


def test_override_creates_missing_section(cfg_file):
    cfg = load_config(cfg_file(), ["eval.every=5"])
    assert cfg.eval.every == 5


def test_preset_sets_defaults_and_explicit_fields_win(cfg_file):
    cfg = load_config(cfg_file(), ["algorithm.name=dapo"])
    assert cfg.algorithm.clip_eps_high == 0.28
    assert cfg.algorithm.loss_agg == "token_mean"
    assert cfg.algorithm.dynamic_sampling is True
    cfg = load_config(cfg_file(), ["algorithm.name=dapo", "algorithm.clip_eps_high=0.3"])
    assert cfg.algorithm.clip_eps_high == 0.3
    cfg = load_config(cfg_file(), ["algorithm.name=dr_grpo"])
    assert cfg.algorithm.norm_adv_by_std is False
    assert cfg.algorithm.loss_agg == "seq_mean_token_sum_norm"


def test_unknown_key_names_path_line_and_suggestion(cfg_file):
    path = cfg_file(BASE.replace("  n: 4", "  temprature: 0.7\n  n: 4"))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert "rollout.temprature" in msg
    assert f"{path}:9" in msg                       # the line of the bad key
    assert "Did you mean `temperature`" in msg
    assert "max_new_tokens" in msg                  # lists the valid fields


def test_wrong_type_names_path_value_and_override(cfg_file):
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file(), ["rollout.n=many"])
    msg = str(e.value)
    assert "rollout.n" in msg and "'many'" in msg and "override 'rollout.n=many'" in msg


def test_literal_lists_allowed_values(cfg_file):
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file(), ["rollout.backend=vllmx"])
    msg = str(e.value)
    assert "rollout.backend" in msg and "'native'" in msg and "'hf'" in msg and "'vllmx'" in msg


def test_every_problem_reported_at_once(cfg_file):
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file(), ["rollout.n=0", "train.steps=-1"])
    msg = str(e.value)
    assert "2 problem(s)" in msg and "rollout.n" in msg and "train.steps" in msg


def test_batch_that_does_not_divide_is_rejected(cfg_file):
    # 8 prompts x 4 samples = 32 samples; micro-batch 5 does not divide them
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file(), ["train.micro_batch_size=5"])
    assert "train.micro_batch_size=5" in str(e.value) and "32" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file(), ["train.mini_batch_size=12"])
    assert "train.mini_batch_size=12" in str(e.value) and "divisor of 32" in str(e.value)


def test_group_estimator_needs_groups(cfg_file):
    with pytest.raises(ConfigError, match="rollout.n >= 2"):
        load_config(cfg_file(), ["rollout.n=1"])


def test_maxrl_refuses_the_penalties_that_make_returns_negative(cfg_file):
    assert load_config(cfg_file(), ["algorithm.advantage=maxrl"]).algorithm.advantage == "maxrl"
    with pytest.raises(ConfigError, match="kl_mode: reward subtracts"):
        load_config(cfg_file(), ["algorithm.advantage=maxrl", "algorithm.kl_coef=0.01", "algorithm.kl_mode=reward"])
    with pytest.raises(ConfigError, match="overlong_buffer: 0"):
        load_config(cfg_file(), ["algorithm.name=dapo", "algorithm.advantage=maxrl"])
    # the KL in the loss leaves the returns alone
    load_config(cfg_file(), ["algorithm.advantage=maxrl", "algorithm.kl_coef=0.01"])


def test_unknown_registry_name_lists_valid_ones(cfg_file):
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file(), ["algorithm.advantage=nope"])
    assert "algorithm.advantage" in str(e.value) and "grpo" in str(e.value) and "gae" in str(e.value)


def test_bad_override_syntax(cfg_file):
    with pytest.raises(ConfigError, match="dotted.key=value"):
        load_config(cfg_file(), ["rollout.n"])
    with pytest.raises(ConfigError, match="not a section"):
        load_config(cfg_file(), ["rollout.n.x=1"])


def test_malformed_yaml_names_file_and_line(cfg_file):
    path = cfg_file("run:\n  name: x\nmodel: [unclosed\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert path in str(e.value) and "not valid YAML" in str(e.value)


def test_missing_required_section(cfg_file):
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file("run:\n  name: x\n"))
    assert "model" in str(e.value) and "required field is missing" in str(e.value)


def test_config_is_frozen(cfg_file):
    cfg = load_config(cfg_file())
    with pytest.raises(pydantic.ValidationError):
        cfg.rollout.n = 3


def test_derived_values_computed_once(cfg_file):
    cfg = load_config(cfg_file(), ["train.mini_batch_size=16", "train.ppo_epochs=2"])
    d = cfg.derived
    assert d is cfg.derived                       # cached: computed once
    assert d.samples_per_step == 32               # 8 prompts x 4
    assert d.optimizer_steps_per_epoch == 2       # 32 / 16
    assert d.optimizer_steps_per_step == 4        # x 2 epochs
    assert d.grad_accum_steps == 4                # 16 / 4
    assert d.micro_batches_per_step == 16         # 32 / 4 x 2


def test_dump_round_trips(cfg_file, tmp_path):
    cfg = load_config(cfg_file(), ["algorithm.name=gspo"])
    p = tmp_path / "resolved.yaml"
    p.write_text(dump_config(cfg))
    again = load_config(p)
    assert again == cfg


def test_parse_override_values_are_yaml():
    assert parse_override("a.b=1e-3") == (["a", "b"], 1e-3)
    assert parse_override("a=null") == (["a"], None)
    assert parse_override("a=") == (["a"], None)
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a=x=y") == (["a"], "x=y")


def test_every_field_is_documented():
    from rlxf.config.docs import field_docs

    undocumented = [path for path, _, _, desc in field_docs(Config) if not desc.strip()]
    assert undocumented == []


def test_micro_batch_larger_than_the_mini_batch_is_capped(cfg_file):
    # 2 prompts x 2 samples = 4 samples per step, one mini-batch of 4; micro-batch 4 (YAML)
    # would divide it, so shrink further: 1 prompt x 2 samples, micro 4 -> capped at 2
    cfg = load_config(cfg_file(), ["train.prompts_per_step=1", "rollout.n=2"])
    d = cfg.derived
    assert (d.samples_per_step, d.mini_batch_size, d.micro_batch_size) == (2, 2, 2)
    assert d.grad_accum_steps == 1 and d.micro_batches_per_step == 1
    assert cfg.train.micro_batch_size == 4  # what the user wrote is kept; the cap is derived


def test_batch_error_caused_by_an_override_blames_the_override(cfg_file):
    path = cfg_file()
    with pytest.raises(ConfigError) as e:
        load_config(path, ["train.mini_batch_size=12"])
    problem = str(e.value).splitlines()[1]
    assert "override 'train.mini_batch_size=12'" in problem
    assert problem.index("override") < problem.index(path)  # the override comes first
    # the same mistake written in the file points at its line (train.mini_batch_size: line 13)
    path = cfg_file(BASE + "  mini_batch_size: 12\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "override" not in str(e.value) and f"{path}:13" in str(e.value)


def test_async_with_staleness_corrects_off_policy_samples_unless_told_otherwise(cfg_file):
    def correction(*overrides):
        cfg = load_config(cfg_file(), list(overrides))
        return cfg.algorithm.off_policy, cfg.algorithm.is_cap

    assert correction() == ("none", None)
    assert correction("rollout.mode=async") == ("none", None)             # k = 0: sync's numbers, bit for bit
    assert correction("rollout.mode=async", "rollout.max_staleness=1") == ("tis", 2.0)
    assert correction("rollout.mode=async", "rollout.max_staleness=2", "algorithm.is_cap=3") == ("tis", 3.0)
    assert correction("rollout.mode=async", "rollout.max_staleness=1", "algorithm.off_policy=none") == ("none", None)
    assert correction("rollout.mode=async", "rollout.max_staleness=1",
                      "algorithm.off_policy=decoupled") == ("decoupled", None)
    assert correction("rollout.max_staleness=1") == ("none", None)         # sync ignores the bound


def test_async_mode_refuses_what_it_cannot_run(cfg_file):
    cfg = load_config(cfg_file(), ["rollout.mode=async", "rollout.max_staleness=2"])
    assert (cfg.rollout.mode, cfg.rollout.max_staleness) == ("async", 2)
    with pytest.raises(ConfigError, match="max_staleness"):
        load_config(cfg_file(), ["rollout.max_staleness=-1"])
    with pytest.raises(ConfigError, match="one decode worker"):
        load_config(cfg_file(), ["rollout.mode=async", "rollout.threads=2"])
    with pytest.raises(ConfigError, match="ray.mode=colocated"):
        load_config(cfg_file(), ["rollout.mode=async", "run.placement=ray"])
    # multi-turn episodes stream too (rlxf.envs.rollout.EpisodeStream)
    assert load_config(cfg_file(), ["rollout.mode=async", "env.name=guess_number"]).env.name == "guess_number"

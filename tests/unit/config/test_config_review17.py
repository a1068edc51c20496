"""Config loading as an outside checker tries it: YAML and override pitfalls that changed a value
without a word, a run's config.yaml that did not load again, and settings that let a run train
nothing or crash at its first evaluation."""

from __future__ import annotations

import sys
import textwrap

import pytest

from rlxf.config import ConfigError, dump_config, load_config, parse_override

BASE = """\
run:
  name: demo
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


@pytest.fixture(autouse=True)
def _isolated_path(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading appends the config's directory


@pytest.fixture
def cfg_file(tmp_path):
    def write(text: str = BASE) -> str:
        p = tmp_path / "run.yaml"
        p.write_text(textwrap.dedent(text))
        return str(p)
    return write


# --- a `#` in an override is text, not a YAML comment that drops the rest ----------------------

@pytest.mark.parametrize("prompt", ["Put the answer after ####", "#### 42", "a #b", "C# or F#"])
def test_a_hash_in_a_text_override_is_kept(cfg_file, prompt):
    cfg = load_config(cfg_file(), [f"data.system_prompt={prompt}"])
    assert cfg.data.system_prompt == prompt


def test_a_comment_in_an_override_of_a_number_is_refused_not_read_as_null(cfg_file):
    with pytest.raises(ConfigError, match=r"train.mini_batch_size=#8.*`#` starts a YAML comment"):
        load_config(cfg_file(), ["train.mini_batch_size=#8"])
    assert parse_override('rollout.stop_strings=["#", "a #b"]')[1] == ["#", "a #b"]   # quoted: text
    assert parse_override("data.system_prompt=null")[1] is None


# --- the run's config.yaml loads again: strings the loader reads as floats are quoted ----------

def test_the_dumped_config_of_text_that_looks_like_a_float_loads_again(cfg_file, tmp_path):
    cfg = load_config(cfg_file(), ["run.name=1e5", "data.system_prompt=2E-3", 'rollout.stop_strings=["1e5"]'])
    written = tmp_path / "config.yaml"
    written.write_text(dump_config(cfg))
    again = load_config(written)
    assert (again.run.name, again.data.system_prompt, again.rollout.stop_strings) == ("1e5", "2E-3", ["1e5"])
    assert again == cfg


# --- YAML 1.1 octal: `010` is not silently 8 ---------------------------------------------------

def test_a_number_with_a_leading_zero_is_refused_naming_the_line(cfg_file):
    path = cfg_file(BASE.replace("name: demo", "name: demo\n  seed: 010"))
    with pytest.raises(ConfigError, match=r"run.yaml:3: .*010 .*octal"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"run.seed=010.*octal"):
        load_config(cfg_file(), ["run.seed=010"])
    assert load_config(cfg_file(), ["run.name=010"]).run.name == "010"     # a text field keeps it
    assert load_config(cfg_file(), ["run.seed=0"]).run.seed == 0
    assert load_config(cfg_file(), ["run.seed=0x10"]).run.seed == 16


# --- numbers must be finite ----------------------------------------------------------------------

@pytest.mark.parametrize("override", ["train.optim.lr=.inf", "train.optim.weight_decay=.inf",
                                      "algorithm.clip_eps_high=.inf", "reward.timeout_s=.inf",
                                      "reward.verifiers=[{type: numeric, weight: .nan}]",
                                      "critic.optim.lr=.nan"])
def test_a_number_that_is_not_finite_is_refused(cfg_file, override):
    with pytest.raises(ConfigError, match=r"finite number"):
        load_config(cfg_file(), [override])


def test_adam_betas_outside_zero_one_are_refused_at_load(cfg_file):
    with pytest.raises(ConfigError, match=r"train.optim.betas.1 .*less than 1"):
        load_config(cfg_file(), ["train.optim.betas=[0.9, 1.0]"])
    assert load_config(cfg_file(), ["train.optim.betas=[0.0, 0.95]"]).train.optim.betas == (0.0, 0.95)


# --- greedy sampling: identical samples ---------------------------------------------------------

@pytest.mark.parametrize("greedy", ["rollout.temperature=0", "rollout.top_k=1"])
def test_greedy_sampling_with_a_group_estimator_is_refused(cfg_file, greedy):
    with pytest.raises(ConfigError, match=r"identical.*advantage='grpo'"):
        load_config(cfg_file(), [greedy])
    assert load_config(cfg_file(), [greedy, "rollout.n=1", "algorithm.name=reinforce_pp"])
    assert load_config(cfg_file(), [greedy, "algorithm.name=ppo"])    # a critic compares states, not samples


def test_pass_at_k_with_greedy_sampling_is_refused_at_load_not_at_the_first_evaluation(cfg_file):
    with pytest.raises(ConfigError, match=r"eval.pass_k=4 .*rollout.temperature"):
        load_config(cfg_file(), ["rollout.temperature=0", "eval.pass_k=4", "algorithm.name=ppo"])


# --- the context window holds the longest prompt and response -----------------------------------

def test_a_context_window_shorter_than_prompt_and_response_is_refused(cfg_file):
    with pytest.raises(ConfigError, match=r"data.max_prompt_len=512 \+ rollout.max_new_tokens=128 .*"
                                          r"rollout.max_model_len=600"):
        load_config(cfg_file(), ["rollout.max_model_len=600"])
    with pytest.raises(ConfigError, match=r"eval.max_new_tokens=200"):
        load_config(cfg_file(), ["rollout.max_model_len=640", "eval.max_new_tokens=200"])
    assert load_config(cfg_file(), ["rollout.max_model_len=640"]).rollout.max_model_len == 640


# --- settings the chosen algorithm never reads are said -----------------------------------------

def test_explain_names_algorithm_settings_the_run_never_reads(cfg_file, tmp_path):
    from rlxf.config.explain import unused_settings

    cfg = load_config(cfg_file(), ["algorithm.kl_estimator=k1", "algorithm.gae_lambda=0.9", "critic.optim.lr=1e-4",
                                   "algorithm.norm_adv_by_std=false", "algorithm.dual_clip_c=2",
                                   "algorithm.max_sampling_rounds=8", "algorithm.overlong_penalty=2"])
    said = "\n".join(unused_settings(cfg))
    for expected in ("algorithm.kl_estimator=k1 does nothing: algorithm.kl_coef is 0",
                     "algorithm.gae_lambda=0.9 does nothing: algorithm.advantage='grpo' is not GAE",
                     "critic.optim is set, and algorithm.advantage='grpo' trains no critic",
                     "algorithm.dual_clip_c=2.0 does nothing: algorithm.policy_loss='ppo_clip' is not dual_clip",
                     "algorithm.max_sampling_rounds=8 does nothing: algorithm.dynamic_sampling is off",
                     "algorithm.overlong_penalty=2.0 does nothing: algorithm.overlong_buffer is 0"):
        assert expected in said
    assert "norm_adv_by_std" not in said          # grpo reads it (false is Dr.GRPO)
    # the same settings where they are read say nothing; nor does a run's own config.yaml, which
    # writes every field down with its default
    ppo = load_config(cfg_file(), ["algorithm.name=ppo", "algorithm.gae_lambda=0.9", "critic.optim.lr=1e-4",
                                   "algorithm.kl_coef=0.1", "algorithm.kl_estimator=k1"])
    assert unused_settings(ppo) == []
    written = tmp_path / "config.yaml"
    written.write_text(dump_config(load_config(cfg_file())))
    assert unused_settings(load_config(written)) == []
    rloo = load_config(cfg_file(), ["algorithm.name=rloo", "algorithm.norm_adv_by_std=false"])
    assert unused_settings(rloo) == ["algorithm.norm_adv_by_std=false does nothing: algorithm.advantage='rloo' "
                                     "does not read it (gae and grpo do)"]


def test_a_name_of_dots_is_refused():
    """'.' and '..' made the run directory run.output_dir itself or the folder above it."""
    from rlxf.config.run import RunConfig

    for name in (".", "..", "..."):
        with pytest.raises(ValueError, match="only dots"):
            RunConfig(name=name)
    assert RunConfig(name="v1.2").name == "v1.2"


def test_explain_names_source_fields_a_mixture_ignores():
    """`rlxf train` warned about data.test_size beside data.sources; `rlxf explain` said nothing."""
    from rlxf.config.explain import unused_settings

    cfg = load_config(None, base={"model": {"path": "m"}, "data": {
        "test_size": 50, "sources": [{"task": "arithmetic", "weight": 1.0}]}})
    assert any("data.test_size set beside data.sources: ignored" in note for note in unused_settings(cfg))
    plain = load_config(None, base={"model": {"path": "m"}, "data": {"task": "arithmetic", "test_size": 50}})
    assert not any("data.sources" in note for note in unused_settings(plain))

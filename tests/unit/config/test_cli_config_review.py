"""Review of the user's path: config values of the wrong kind, and the inputs a command checks
before it starts, are reported as config errors that name the field and where it was set."""

from __future__ import annotations

import sys
import textwrap

import pytest

from rlxf.cli.main import main
from rlxf.cli.preflight import check_inputs, check_pair_inputs
from rlxf.config import ConfigError, load_config
from rlxf.config.load import load_config_located

BASE = {"model": {"path": "m"}, "data": {"task": "arithmetic"}}


@pytest.fixture
def isolated_path(monkeypatch):
    """Config loading appends the config's directory to sys.path; undo it after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.mark.parametrize(("key", "value"), [("name", ["grpo"]), ("name", {"a": 1}), ("off_policy", ["tis"])])
def test_a_preset_name_that_is_not_text_is_a_config_error(key, value):
    """The presets were looked up with the value (as YAML wrote it) as a dict key: a list or a
    mapping raised TypeError (exit 1, no field named)."""
    with pytest.raises(ConfigError) as err:
        load_config(None, base={**BASE, "algorithm": {key: value}})
    assert f"algorithm.{key} (defaults)" in str(err.value)


@pytest.mark.parametrize("value", ["null", "[1]", "{a: 1}", "abc", "1e400"])
def test_async_staleness_that_is_not_a_number_is_a_config_error(value):
    """The async default off-policy correction read max_staleness with int(): None, a list or a
    mapping raised TypeError, inf OverflowError, and text a message without the field's name."""
    with pytest.raises(ConfigError) as err:
        load_config(None, ["rollout.mode=async", f"rollout.max_staleness={value}"], base=BASE)
    assert f"rollout.max_staleness (override 'rollout.max_staleness={value}')" in str(err.value)


def _mixture_config(tmp_path, model) -> str:
    (tmp_path / "ok.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    (tmp_path / "q.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n')
    (tmp_path / "adir").mkdir()
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(f"""\
        run: {{name: start, output_dir: {tmp_path / 'runs'}}}
        model: {{path: {model}}}
        data:
          sources:
            - {{name: a, source: jsonl, train_path: {tmp_path / 'ok.jsonl'}}}
            - {{name: b, source: jsonl, train_path: {tmp_path / 'q.jsonl'}}}
            - {{name: c, source: jsonl, train_path: {tmp_path / 'adir'}}}
        rollout: {{n: 2, max_new_tokens: 4}}
        reward: {{verifiers: [{{type: numeric}}]}}
        train: {{steps: 1, prompts_per_step: 2}}
        """))
    return str(path)


def test_start_checks_name_the_field_the_source_and_the_line(tmp_path, isolated_path):
    """Before: the first problem alone, without its field or line ("data file X does not exist"
    for a directory), and a mixture source's fix named as data.fields, which it ignores."""
    path = _mixture_config(tmp_path, tmp_path / "nowhere")
    cfg, origins = load_config_located(path)
    with pytest.raises(ConfigError) as err:
        check_inputs(cfg, origins=origins)
    text = str(err.value)
    assert "3 problem(s)" in text
    assert f"model.path ({path}:2): model.path {tmp_path / 'nowhere'} does not exist" in text
    assert f"data.sources.1.train_path ({path}:6)" in text
    assert "Set data.sources.1.fields.prompt to the key" in text and "data.fields" not in text
    assert f"data.sources.2.train_path ({path}:7): {tmp_path / 'adir'} is a directory, not a jsonl file" in text


def test_train_exits_2_with_the_located_problems_and_no_run_dir(tmp_path, capsys, isolated_path):
    path = _mixture_config(tmp_path, tmp_path / "nowhere")
    assert main(["train", path, f"data.sources.0.train_path={tmp_path / 'gone.jsonl'}"]) == 2
    err = capsys.readouterr().err
    assert f"data.sources.0.train_path (override 'data.sources.0.train_path={tmp_path / 'gone.jsonl'}'): " \
           f"data file {tmp_path / 'gone.jsonl'} does not exist" in err
    assert not (tmp_path / "runs" / "start").exists()


def test_explain_refuses_a_directory_given_for_a_data_file(tmp_path, nano_model_dir, capsys, isolated_path):
    """`rlxf explain` warned that the directory "does not exist (yet)"."""
    path = _mixture_config(tmp_path, nano_model_dir)
    assert main(["explain", path, f"data.sources.1.train_path={tmp_path / 'ok.jsonl'}"]) == 2
    captured = capsys.readouterr()
    assert "data.sources.2.train_path" in captured.err and "is a directory" in captured.err
    assert "does not exist" not in captured.out + captured.err


def test_preference_start_checks_name_the_file_field(tmp_path, nano_model_dir, isolated_path):
    (tmp_path / "pairs.jsonl").write_text('{"prompt": "q", "good": "a", "rejected": "b"}\n')
    path = tmp_path / "rm.yaml"
    path.write_text(textwrap.dedent(f"""\
        model: {{path: {nano_model_dir}}}
        data:
          source: jsonl
          train_path: {tmp_path / 'pairs.jsonl'}
        """))
    cfg, origins = load_config_located(path)
    with pytest.raises(ConfigError) as err:
        check_pair_inputs(cfg, origins)
    assert f"data.train_path ({path}:4)" in str(err.value) and "chosen" in str(err.value)


def test_report_names_the_run_directory_above_a_file_or_checkpoint(tmp_path, capsys):
    """Every bad path was "X has no metrics.jsonl", a missing one and the run's own metrics file alike."""
    run = tmp_path / "runs" / "x"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    assert main(["report", str(run / "metrics.jsonl")]) == 2
    assert f"is a file, not a run directory; did you mean its run directory {run}?" in capsys.readouterr().err
    assert main(["report", str(run / "checkpoints" / "step_2")]) == 2
    assert f"did you mean its run directory {run}?" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert f"{tmp_path / 'nope'} does not exist" in capsys.readouterr().err


def test_an_override_written_as_an_option_says_to_drop_the_dashes(tmp_path, capsys):
    assert main(["explain", str(tmp_path / "c.yaml"), "--rollout.n=8"]) == 2
    assert "write rollout.n=VALUE after the config file" in capsys.readouterr().err


def test_a_verifier_field_is_named_as_it_is_written(tmp_path):
    """pydantic's location holds the discriminated union's tag (reward.verifiers.0.numeric.extrct),
    which is no path a user can write; the missing field gave no hint of what it is."""
    path = tmp_path / "v.yaml"
    path.write_text("model: {path: m}\ndata: {task: arithmetic}\nreward:\n  verifiers:\n"
                    "    - type: numeric\n      extrct: [last_number]\n    - {type: custom}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert f"reward.verifiers.0.extrct ({path}:6): unknown field. Did you mean `extract`?" in text
    assert f"reward.verifiers.1.function ({path}:7): required field is missing: `package.module:function`" in text
    assert ".numeric." not in text and ".custom." not in text


def test_an_unknown_environment_name_is_a_config_error_before_any_model_loads():
    """It was found only after the model loaded and the run directory was made (then removed)."""
    with pytest.raises(ConfigError) as err:
        load_config(None, ["env.name=guess_numbr"], base=BASE)
    text = str(err.value)
    assert "env.name (override 'env.name=guess_numbr')" in text and "Did you mean `guess_number`?" in text
    assert "plugins:" in text


@pytest.mark.parametrize("weight", [".inf", ".nan"])
def test_a_mixture_weight_must_be_finite(weight):
    data = {"sources": [{"task": "arithmetic"}, {"task": "arithmetic", "name": "b"}]}
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"data.sources.1.weight={weight}"], base={**BASE, "data": data})
    assert "data.sources.1.weight" in str(err.value)


def test_a_script_function_missing_on_resume_says_to_pass_reward_funcs_again():
    """config.yaml records rlxf.train(reward_funcs=[lambda ...]) as __main__:<name>; loading it
    alone said only that __main__ has no such function."""
    verifiers = [{"type": "custom", "name": "reward_0", "function": "__main__:reward_0"}]
    with pytest.raises(ConfigError, match=r"has no function 'reward_0'; .*pass reward_funcs again"):
        load_config(None, base={**BASE, "reward": {"verifiers": verifiers}})


def test_ray_placement_without_ray_installed_is_a_start_problem(tmp_path, isolated_path, monkeypatch):
    """It surfaced as an ImportError (exit 1) once the run directory was set up."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    path = _mixture_config(tmp_path, tmp_path / "nowhere")
    cfg, origins = load_config_located(path, ["run.placement=ray"])
    with pytest.raises(ConfigError, match=r"run.placement \(override 'run.placement=ray'\): run.placement=ray needs "
                                          r"Ray, which is not installed"):
        check_inputs(cfg, origins=origins)

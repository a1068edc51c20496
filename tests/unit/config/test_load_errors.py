"""Config errors a user can act on: duplicated YAML keys, unreadable files, the checks after the
schema naming the file and line or the override, plugins that fail their own import, and
`rlxf explain` refusing what `rlxf train` refuses at once."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from rlxf.cli.main import main
from rlxf.config import ConfigError, load_config

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
  steps: 7
  prompts_per_step: 8
  micro_batch_size: 4
"""


@pytest.fixture
def cfg_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading appends the config's directory

    def write(text: str = BASE) -> str:
        p = tmp_path / "run.yaml"
        p.write_text(textwrap.dedent(text))
        return str(p)
    return write


def _error(path, overrides=()) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path, list(overrides))
    return str(e.value)


# -- the YAML file itself --------------------------------------------------------------------------

def test_a_section_written_twice_is_an_error_not_a_silent_loss(cfg_file):
    path = cfg_file(BASE + "train:\n  micro_batch_size: 2\n")
    msg = _error(path)
    assert f"{path}:13" in msg and "`train`" in msg and "first on line 9" in msg


def test_a_key_written_twice_in_one_section_names_its_path(cfg_file):
    path = cfg_file(BASE.replace("  steps: 7\n", "  steps: 7\n  steps: 9\n"))
    msg = _error(path)
    assert f"{path}:11" in msg and "`train.steps`" in msg and "first on line 10" in msg


def test_merge_keys_are_not_duplicates(cfg_file):
    path = cfg_file(BASE + textwrap.dedent("""\
        reward:
          verifiers:
            - &v {type: numeric, name: a}
            - {<<: *v, name: b}
        """))
    assert [v.name for v in load_config(path).reward.verifiers] == ["a", "b"]


def test_a_directory_is_not_called_missing(tmp_path, capsys):
    (tmp_path / "run.yaml").write_text(BASE)
    assert main(["explain", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "does not exist" not in err and "run.yaml" in err


def test_a_file_that_is_not_utf8_is_a_config_error_naming_it(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_bytes(BASE.encode().replace(b"name: demo", b"name: d\xffmo"))
    assert main(["explain", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2" in err and "UTF-8" in err and "UnicodeDecodeError" not in err


# -- the checks after the schema name where the value came from -----------------------------------

def test_group_estimator_with_one_sample_names_the_override_or_the_line(cfg_file):
    path = cfg_file()
    assert "override 'rollout.n=1'" in _error(path, ["rollout.n=1"]).splitlines()[1]
    path = cfg_file(BASE.replace("n: 4", "n: 1"))
    line = _error(path).splitlines()[1]
    assert line.startswith("  - rollout.n") and f"{path}:8" in line and "rollout.n >= 2" in line


def test_unknown_registry_name_names_the_override(cfg_file):
    line = _error(cfg_file(), ["algorithm.advantage=typo"]).splitlines()[1]
    assert "algorithm.advantage" in line and "override 'algorithm.advantage=typo'" in line and "grpo" in line


def test_unknown_task_is_named_where_it_is(cfg_file):
    msg = _error(cfg_file(), ["data.task=arithmetik"])
    assert "data.task (override 'data.task=arithmetik')" in msg and "Did you mean `arithmetic`" in msg
    mixture = BASE.replace("  task: arithmetic\n", "  sources:\n    - {task: arithmetic}\n    - {task: arithmetik}\n")
    path = cfg_file(mixture)
    msg = _error(path)
    assert f"data.sources.1.task ({path}:8)" in msg and "(data.task)" not in msg


def test_plugin_whose_own_import_fails_says_so(cfg_file, tmp_path):
    (tmp_path / "plugin_with_missing_dep_17.py").write_text("import no_such_dependency_17\n")
    msg = _error(cfg_file(BASE + "plugins: [plugin_with_missing_dep_17]\n"))
    assert "plugins.0" in msg and "was found" in msg and "'no_such_dependency_17'" in msg
    assert str(tmp_path / "plugin_with_missing_dep_17.py") in msg and "Put it in" not in msg
    # a plugin that is not there at all still gets the advice where to put it
    msg = _error(cfg_file(BASE + "plugins: [no_such_plugin_17]\n"))
    assert "cannot import 'no_such_plugin_17'" in msg and "Put it in" in msg


def test_plugin_with_a_syntax_error_exits_2_naming_file_and_line(cfg_file, tmp_path, capsys):
    (tmp_path / "plugin_with_typo_17.py").write_text("x = 1\ndef f(:\n")
    path = cfg_file(BASE + "plugins: [plugin_with_typo_17]\n")
    assert main(["explain", path]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'plugin_with_typo_17.py'}:2" in err and "SyntaxError" in err and f"{path}:13" in err


def test_reward_module_whose_own_import_fails_says_so(cfg_file, tmp_path):
    (tmp_path / "reward_with_missing_dep_17.py").write_text("import no_such_dependency_17\ndef f(s): return 1\n")
    msg = _error(cfg_file(BASE + "reward:\n  verifiers: [{type: 'reward_with_missing_dep_17:f'}]\n"))
    assert "reward.verifiers.0.function" in msg and "was found" in msg and "'no_such_dependency_17'" in msg


# -- rlxf explain checks what rlxf train checks before it loads a model ---------------------------

@pytest.fixture
def no_model(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network retries
    return f"model.path={tmp_path / 'no_model'}"


@pytest.mark.parametrize(("overrides", "expected"), [
    (["data.task=nosuchtask"], "data.task (override 'data.task=nosuchtask'): unknown task"),
    (["data.task_options.bogus=1"], "data.task_options (override 'data.task_options.bogus=1'"),
    (["data.task_options.max_digits=0"], "max_digits"),
])
def test_explain_refuses_a_bad_task(cfg_file, no_model, capsys, overrides, expected):
    assert main(["explain", cfg_file(), no_model, *overrides]) == 2
    assert expected in capsys.readouterr().err


def test_explain_refuses_bad_options_of_a_mixture_source(cfg_file, no_model, capsys):
    mixture = BASE.replace("  task: arithmetic\n",
                           "  sources:\n    - {task: arithmetic}\n    - {task: arithmetic, name: b, task_options: {bad: 1}}\n")
    path = cfg_file(mixture)
    assert main(["explain", path, no_model]) == 2
    assert f"data.sources.1.task_options ({path}:8)" in capsys.readouterr().err


def test_explain_checks_the_first_record_and_warns_of_a_missing_file(cfg_file, no_model, tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n')
    files = ["data.task=null", "data.source=jsonl", f"data.train_path={data}"]
    assert main(["explain", cfg_file(), no_model, *files]) == 2
    err = capsys.readouterr().err
    assert "data.train_path (override" in err and "'prompt'" in err
    assert main(["explain", cfg_file(), no_model, *files, "data.fields.prompt=question",
                 "data.fields.ground_truth=answer"]) == 0
    capsys.readouterr()
    # a file not made yet (as a recipe's, before its data script ran) is a warning, like the model
    missing = tmp_path / "not_made_yet.jsonl"
    assert main(["explain", cfg_file(), no_model, "data.task=null", "data.source=jsonl",
                 f"data.train_path={missing}"]) == 0
    assert f"data.train_path: data file {missing} does not exist" in capsys.readouterr().out


# -- benchmarks ------------------------------------------------------------------------------------

def test_grpo_step_benchmark_help(monkeypatch, capsys):
    benchmarks = Path(__file__).parents[3] / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))
    spec = importlib.util.spec_from_file_location("grpo_step_bench", benchmarks / "grpo_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as e:
        module.main(["--help"])
    assert e.value.code == 0 and "--omp-wait-policy" in capsys.readouterr().out


def test_explain_warns_of_a_staleness_bound_that_sync_mode_ignores(cfg_file, no_model, capsys):
    assert main(["explain", cfg_file(), no_model, "rollout.max_staleness=2"]) == 0
    assert "rollout.max_staleness=2 does nothing under rollout.mode=sync" in capsys.readouterr().out
    assert main(["explain", cfg_file(), no_model, "rollout.max_staleness=2", "rollout.mode=async"]) == 0
    assert "does nothing" not in capsys.readouterr().out


def test_a_boolean_is_not_a_number(cfg_file):
    # pydantic would read `steps: yes` as 1 step, and YAML reads yes/on as true
    with pytest.raises(ConfigError, match=r"steps: expected a number, got true") as e:
        load_config(cfg_file(), ["train.steps=yes"])
    assert "override 'train.steps=yes'" in str(e.value)
    with pytest.raises(ConfigError, match=r"lr: expected a number, got false"):
        load_config(cfg_file(), ["train.optim.lr=off"])
    with pytest.raises(ConfigError, match=r"max_staleness: expected a number"):
        load_config(cfg_file(), ["rollout.max_staleness=true"])
    # booleans where booleans belong, numbers where numbers belong
    cfg = load_config(cfg_file(), ["algorithm.norm_adv_by_std=off", "train.steps=3", "train.optim.lr=0.5"])
    assert cfg.algorithm.norm_adv_by_std is False and cfg.train.steps == 3 and cfg.train.optim.lr == 0.5


def test_a_source_name_with_a_control_character_is_refused(cfg_file):
    """It names the per-source metrics and the progress line: a newline or an escape would break
    the one line per step that CI logs rely on."""
    mixture = BASE.replace("  task: arithmetic\n", '  sources:\n    - {task: arithmetic, name: "a\\nb"}\n'
                                                    "    - {task: arithmetic, name: b}\n")
    assert "control character" in _error(cfg_file(mixture))

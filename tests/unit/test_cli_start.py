"""Starting a run: bad inputs are reported (exit 2, naming the field) before `runs/<name>/`
exists, so the corrected command is not refused with "already exists" (issue 17, items 3-5)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from rlxf.cli.main import main
from rlxf.cli.train import discard_on_failed_start
from rlxf.config import ConfigError, load_config
from rlxf.run_dir import RunDir

EXAMPLE = Path(__file__).parents[2] / "examples" / "grpo_arithmetic.yaml"


@pytest.fixture
def isolated_path(monkeypatch):
    """Config loading appends the config's directory to sys.path; undo it after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def _write_config(directory: Path, model: Path | str, *, data: str = "{task: arithmetic}",
                  verifier: str = "{type: numeric}") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "run.yaml"
    path.write_text(textwrap.dedent(f"""\
        run: {{name: start, output_dir: {directory / 'runs'}}}
        model: {{path: {model}}}
        data: {data}
        rollout: {{n: 2, max_new_tokens: 4}}
        reward: {{verifiers: [{verifier}]}}
        train: {{steps: 1, prompts_per_step: 2}}
        """))
    return path


def test_example_without_the_quickstart_says_to_run_it(tmp_path, capsys):
    missing = tmp_path / "qs" / "sft" / "model"
    code = main(["train", str(EXAMPLE), f"model.path={missing}", f"run.output_dir={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"model.path {missing} does not exist" in err and "tokenizer" not in err
    assert f"rlxf quickstart {tmp_path / 'qs'}" in err
    assert not (tmp_path / "runs" / "grpo-arithmetic").exists()


def test_other_missing_model_offers_init_model_only_as_a_smoke_test(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["train", str(EXAMPLE), f"model.path={missing}", f"run.output_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert "trained causal LM" in err and "init-model" in err and "untrained" in err


def test_missing_tokenizer_is_named_as_model_tokenizer(tmp_path, capsys, nano_model_dir):
    missing = tmp_path / "tok"
    assert main(["train", str(EXAMPLE), f"model.path={nano_model_dir}", f"model.tokenizer={missing}",
                 f"run.output_dir={tmp_path / 'runs'}"]) == 2
    assert f"model.tokenizer {missing} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_bad_data_field_fails_before_the_run_directory(tmp_path, capsys, nano_model_dir):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
    path = _write_config(tmp_path, nano_model_dir, data=f"{{source: jsonl, train_path: {data}}}")
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert "prompt" in err and str(data) in err
    assert not (tmp_path / "runs" / "start").exists()
    # the corrected rerun is not refused: its config now gets past the data check
    assert main(["explain", str(path), "data.fields.prompt=question", "data.fields.ground_truth=answer"]) == 0


def test_unknown_task_fails_before_the_run_directory(tmp_path, capsys, nano_model_dir):
    path = _write_config(tmp_path, nano_model_dir, data="{task: arithmetik}")
    assert main(["train", str(path)]) == 2
    assert "arithmetik" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "start").exists()


def test_reward_import_error_exits_2_before_the_run_directory(tmp_path, capsys, nano_model_dir, isolated_path):
    path = _write_config(tmp_path, nano_model_dir, verifier="{type: 'no_such_reward_module_17:score'}")
    for command in ("train", "sft"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert "reward.verifiers.0.function" in err and "no_such_reward_module_17" in err
        assert str(tmp_path) in err  # where to put the module
        assert not (tmp_path / "runs" / "start").exists()


def test_reward_module_next_to_the_config_is_found_without_plugins(tmp_path, monkeypatch, isolated_path):
    from rlxf.rewards import build_reward
    from rlxf.rewards.types import RewardInput

    config_dir = tmp_path / "experiment"
    path = _write_config(config_dir, "m", verifier="{type: 'nextdoor_reward_17:score'}")
    (config_dir / "nextdoor_reward_17.py").write_text("def score(sample):\n    return 0.25\n")
    monkeypatch.chdir(tmp_path)  # not the config's directory
    cfg = load_config(path)
    assert cfg.plugins == []
    reward = build_reward(cfg.reward)
    try:
        [scored] = reward.score([RewardInput(prompt="p", response="r")])
    finally:
        reward.close()
    assert scored.reward == 0.25 and scored.error is None


def test_function_missing_from_the_module_is_a_config_error(tmp_path, isolated_path):
    config_dir = tmp_path / "experiment"
    path = _write_config(config_dir, "m", verifier="{type: 'nextdoor_reward_17b:scroe'}")
    (config_dir / "nextdoor_reward_17b.py").write_text("def score(sample):\n    return 1.0\n")
    with pytest.raises(ConfigError, match=r"reward.verifiers.0.function: .*no function 'scroe'"):
        load_config(path)


def test_a_start_that_fails_later_leaves_no_run_directory(tmp_path):
    run = RunDir.open(tmp_path, "x")
    run.config.write_text("run: {}\n")
    with pytest.raises(RuntimeError), discard_on_failed_start(run, fresh=True):
        raise RuntimeError("engine failed to start")
    assert not run.path.exists()
    RunDir.open(tmp_path, "x")  # the rerun is not refused


def test_a_run_that_logged_a_step_or_resumed_keeps_its_directory(tmp_path):
    run = RunDir.open(tmp_path, "x")
    run.metrics.write_text('{"step": 1}\n')
    with pytest.raises(RuntimeError), discard_on_failed_start(run, fresh=True):
        raise RuntimeError("step 2 failed")
    assert run.metrics.exists()
    empty = RunDir.open(tmp_path, "y")
    with pytest.raises(RuntimeError), discard_on_failed_start(empty, fresh=False):  # --resume
        raise RuntimeError("x")
    assert empty.path.exists()


def test_resume_of_a_run_written_before_a_field_existed(tmp_path, isolated_path):
    """A field added since the run was written compares as its default; a changed one refuses."""
    import yaml

    from rlxf.cli.errors import UsageError
    from rlxf.cli.train import check_resume_compatible
    from rlxf.config import dump_config

    cfg = load_config(EXAMPLE, [])
    saved = yaml.safe_load(dump_config(cfg))
    del saved["algorithm"]["off_policy"]  # as an rlxf from before the field wrote it
    old = tmp_path / "config.yaml"
    old.write_text(yaml.safe_dump(saved))
    check_resume_compatible(old, cfg)
    saved["algorithm"]["clip_eps_low"] = 0.5
    old.write_text(yaml.safe_dump(saved))
    with pytest.raises(UsageError, match=r"algorithm\.clip_eps_low;"):
        check_resume_compatible(old, cfg)


def test_resume_refuses_a_new_length_under_a_cosine_schedule(tmp_path, isolated_path):
    """train.steps may change on resume, but a cosine decay is laid over it: the lr would jump.
    Refused before any model loads (the learner's own check comes only once it loads)."""
    from rlxf.cli.errors import UsageError
    from rlxf.cli.train import check_resume_compatible
    from rlxf.config import dump_config

    old = tmp_path / "config.yaml"
    for schedule, refused in (("constant", False), ("cosine", True)):
        cfg = load_config(EXAMPLE, [f"train.optim.schedule={schedule}", "train.steps=10"])
        old.write_text(dump_config(cfg))
        longer = load_config(EXAMPLE, [f"train.optim.schedule={schedule}", "train.steps=20"])
        if refused:
            with pytest.raises(UsageError, match=r"train\.steps changed, and train\.optim\.schedule is cosine"):
                check_resume_compatible(old, longer)
        else:
            check_resume_compatible(old, longer)
        check_resume_compatible(old, cfg)   # the same length resumes under either

"""Command-line paths an outside review (17) found wrong: `rlxf quickstart --resume` continued a
stage on other arguments than it started with, and reported it under the new ones; a path the
user gave (`eval --checkpoint`, the quickstart's OUT) was read as YAML on its way into the config;
`generate` exited 0 when its samples failed."""

from __future__ import annotations

import json
import shutil

import yaml

import rlxf.models
from rlxf.cli import quickstart
from rlxf.cli.main import main


def _interrupted_at_the_base_model(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rlxf.models, "init_model", interrupted)


def test_quickstart_resume_takes_the_arguments_it_started_with(tmp_path, capsys, monkeypatch):
    """Started with --seed 3 --no-remedy and interrupted, the README's `rlxf quickstart OUT
    --resume` (no flags) went on with seed 0 and PPO-ptx: its GRPO run trained half with and half
    without the remedy, and the table and summary.json named only the second."""
    out = tmp_path / "qs"
    _interrupted_at_the_base_model(monkeypatch)
    assert main(["quickstart", str(out), "--seed", "3", "--preset", "nano", "--no-remedy", "--rl-steps", "2"]) == 130
    assert f"rlxf quickstart {out} --seed 3 --preset nano --resume --rl-steps 2 --no-remedy" in capsys.readouterr().err
    assert json.loads((out / "quickstart.json").read_text()) == {
        "seed": 3, "preset": "nano", "remedy": False, "rl_steps": 2, "sft_steps": None}

    called = {}

    def finished(out, **kwargs):
        called.update(kwargs)
        return [quickstart.Result("m", 0.0, 0.0, 1.0)] * 3

    monkeypatch.setattr(quickstart, "run_quickstart", finished)
    assert main(["quickstart", str(out), "--resume"]) == 0
    assert {k: called[k] for k in quickstart.DEFAULTS} == {
        "seed": 3, "preset": "nano", "remedy": False, "rl_steps": 2, "sft_steps": None}


def test_quickstart_resume_refuses_other_arguments_and_changes_nothing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "qs"
    _interrupted_at_the_base_model(monkeypatch)
    assert main(["quickstart", str(out), "--preset", "nano", "--no-remedy"]) == 130
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["quickstart", str(out), "--resume", "--remedy", "--seed", "0", "--sft-steps", "5"]) == 2
    err = capsys.readouterr().err
    assert ("started with --remedy/--no-remedy (--no-remedy), --sft-steps (the recipe's), not "
            "--remedy/--no-remedy (--remedy), --sft-steps 5") in err   # --seed 0 is what it started with
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_quickstart_resume_names_a_damaged_record(tmp_path, capsys, monkeypatch):
    _interrupted_at_the_base_model(monkeypatch)
    out = tmp_path / "qs"
    out.mkdir()
    (out / "quickstart.log").write_text("")
    (out / "quickstart.json").write_text('{"seed": 1')
    assert main(["quickstart", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"cannot read {out / 'quickstart.json'}" in err and "--overwrite" in err


def test_a_path_given_on_the_command_line_reaches_the_config_as_written(tmp_path, nano_model_dir, capsys,
                                                                       monkeypatch):
    """`--checkpoint null` was refused as "model.path (override 'model.path=null'): Input should be
    a valid string" (an override the user never wrote), and ` runs/x` lost its space and was looked
    for on the hub: the path went into an unquoted override, read as YAML."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(nano_model_dir, tmp_path / "null")
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"path": "unused"}, "data": {"task": "arithmetic", "train_size": 8, "test_size": 2},
        "reward": {"verifiers": [{"type": "numeric"}]}, "rollout": {"max_new_tokens": 2},
        "eval": {"num_problems": 2}}))
    assert main(["eval", str(config), "--checkpoint", "null"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "null"

    for out in ("null", " runs/x #1", "~", "a: b"):
        cfg = quickstart._config("sft", tmp_path / out, 0, [quickstart.path_override("model.path", out)])
        assert (cfg.run.output_dir, cfg.model.path) == (str(tmp_path / out), out)


def test_generate_exits_1_when_samples_failed_and_refuses_a_blank_prompt(nano_model_dir, capsys):
    """A prompt longer than the model's window printed "sample 0 failed" and exited 0, so a script
    took the run for answers; an empty prompt (refused in --prompts-file) was sent as it was."""
    model = str(nano_model_dir)
    long = "1+" * 1100   # 2,200 tokens or more: past the nano model's 2,048-token window
    assert main(["generate", model, "1+1=", long, "--max-new-tokens", "1", "--no-chat-template"]) == 1
    captured = capsys.readouterr()
    assert captured.out.count("--- sample 0 failed: prompt has ") == 1 and "--- sample 0 (" in captured.out
    assert "error: 1 of 2 samples failed; the reasons are above" in captured.err
    assert main(["generate", model, "1+1=", " "]) == 2
    assert "prompt 1 is empty (no text but whitespace)" in capsys.readouterr().err


def test_generate_names_an_option_out_of_range(capsys):
    """`-n 0` was refused as "invalid SamplingParams: n must be >= 1", naming no option."""
    for args, option in ((["-n", "0"], "'-n'"), (["--max-new-tokens", "0"], "'--max-new-tokens'"),
                         (["--temperature", "-1"], "'--temperature'")):
        assert main(["generate", "no-such-model-dir", "hi", *args]) == 2
        assert f"Invalid value for {option}" in capsys.readouterr().err

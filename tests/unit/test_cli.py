"""The `rlxf` command line: help, exit codes, lazy imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlxf.cli.main import main

EXAMPLE = Path(__file__).parents[2] / "examples" / "grpo_arithmetic.yaml"
COMMANDS = ("train", "sft", "eval", "explain", "config-docs", "report", "init-model", "generate",
            "serve-reward", "quickstart")


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


def test_unknown_command_and_option_are_usage_errors():
    assert main(["trian"]) == 2
    assert main(["explain", str(EXAMPLE), "--bogus"]) == 2


def test_bad_config_exits_2_with_the_field(capsys, tmp_path):
    assert main(["explain", str(EXAMPLE), "rollout.n=zero"]) == 2
    assert "rollout.n" in capsys.readouterr().err
    assert main(["explain", str(tmp_path / "missing.yaml")]) == 2


def test_explain_prints_batch_arithmetic_and_memory(capsys, nano_model_dir):
    assert main(["explain", str(EXAMPLE), f"model.path={nano_model_dir}", "rollout.n=4", "train.optim.lr=auto"]) == 0
    out = capsys.readouterr().out
    assert "samples per step" in out and "64" in out          # 16 prompts x 4 samples
    assert "memory estimate" in out and "361,024 parameters" in out
    assert "actor" in out and "engine" in out
    assert "actor lr: auto = 0.00078 (0.1 / (hidden 64 x 2 layers)" in out   # the nano preset


def test_explain_shows_the_placement_without_a_model(capsys, tmp_path, monkeypatch):
    # the README's `explain CONFIG run.placement=ray` on an example before its model exists:
    # the roles and their processes are known from the config alone, their memory is not
    monkeypatch.setenv("COLUMNS", "200")   # table cells whole, whatever the terminal
    assert main(["explain", str(EXAMPLE), f"model.path={tmp_path / 'not-yet'}", "run.placement=ray",
                 "ray.mode=disaggregated"]) == 0
    out = " ".join(capsys.readouterr().out.split())   # rich wraps lines at the terminal's width
    assert "memory estimate skipped" in out and "placement: ray (disaggregated)" in out
    assert "Ray actor: learner" in out and "Ray actor: engine 0" in out


def test_import_rlxf_is_light():
    code = ("import sys, rlxf, rlxf.cli.main, rlxf.config, rlxf.rewards, rlxf.rollout, rlxf.data, rlxf.models;"
            "heavy = [m for m in ('ray', 'vllm', 'deepspeed', 'wandb', 'mlflow') if m in sys.modules];"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

"""The small things of issue 17.17: --version, flag help, config-docs of task options, explain's
order, and permissions of saved weights. (`eval` writing into the run: test_model_paths.py;
sinks that are not installed: metrics/test_sinks.py.)"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import rlxf
from rlxf.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo_arithmetic.yaml"


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"rlxf {rlxf.__version__}"


def test_flags_are_not_shown_as_taking_a_value(capsys):
    assert main(["train", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--resume" in help_text and "<bool>" not in help_text and "BOOLEAN" not in help_text


def test_config_docs_lists_every_arithmetic_option(capsys):
    from rlxf.data.tasks.arithmetic import ArithmeticOptions

    assert main(["config-docs", "data"]) == 0
    out = capsys.readouterr().out
    for option in ArithmeticOptions.model_fields:   # zero_pad and carries were missing
        assert f"data.task_options[task=arithmetic].{option}:" in out, option
    assert "data.task_options[task=arithmetic].carries: tuple[int, int] | null = None" in out


def test_explain_shows_the_tables_before_the_config(capsys, nano_model_dir):
    assert main(["explain", str(EXAMPLE), f"model.path={nano_model_dir}"]) == 0
    out = capsys.readouterr().out
    assert out.index("batch arithmetic") < out.index("memory estimate") < out.index("config: fields")
    assert "matmul kernels" in out and "trainer linear layers:" in out
    # only what the file and overrides set: the example's handful of fields, not all ~200
    config_part = out[out.index("config: fields"):]
    assert "zero_pad: true" in config_part and "kl_estimator" not in config_part
    assert len(config_part.splitlines()) < 60
    assert main(["explain", str(EXAMPLE), f"model.path={nano_model_dir}", "--full-config"]) == 0
    assert "kl_estimator" in capsys.readouterr().out


def test_saved_weights_follow_the_umask_like_every_other_file(tmp_path, nano_model_dir):
    from rlxf.models import load_model, save_model

    old = os.umask(0o022)
    try:
        out = save_model(load_model(nano_model_dir), tmp_path / "saved")
    finally:
        os.umask(old)
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in out.iterdir()}
    assert modes["model.safetensors"] == 0o644, modes   # was 0600: unreadable to a team or a server
    assert set(modes.values()) == {0o644}

"""A newcomer's path through the command line (review 19): what --help promises is what the
commands do, and a seed out of range is refused before the quickstart or init-model writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlxf.cli.main import main


def _help(capsys, *command: str) -> str:
    assert main([*command, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())  # help wraps its lines


def test_report_help_names_the_file_several_runs_are_written_to(capsys):
    """`rlxf report runs/a runs/b` writes runs/compare-a-vs-b.html, not RUN_DIR/report.html,
    which was all that --help said of the default."""
    from rlxf.metrics.report import default_output

    assert default_output([Path("runs/a"), Path("runs/b")]) == Path("runs/compare-a-vs-b.html")
    text = _help(capsys, "report")
    assert "RUN_DIR/report.html for one run" in text
    assert "compare-A-vs-B.html beside the first run for several" in text


@pytest.mark.parametrize("seed", [str(2**64), "-1"])
@pytest.mark.parametrize("command", ["quickstart", "init-model"])
def test_seed_out_of_range_is_refused_before_anything_is_written(tmp_path, capsys, command, seed):
    """A seed of 2**64 failed in torch.manual_seed with "Overflow when unpacking long long" (exit
    1) after the quickstart had made OUT, whose rerun was then refused as "already exists"."""
    out = tmp_path / "out"
    assert main([command, str(out), f"--seed={seed}"]) == 2
    assert "--seed" in capsys.readouterr().err
    assert not out.exists()


def test_largest_seed_torch_takes_is_passed_on(tmp_path, monkeypatch):
    import torch

    import rlxf.cli.init_model

    torch.Generator().manual_seed(2**64 - 1)  # the bound is torch's own
    seen = {}
    monkeypatch.setattr(rlxf.cli.init_model, "run", lambda out, **kw: seen.update(kw))
    assert main(["init-model", "--preset", "nano", "--seed", str(2**64 - 1), str(tmp_path / "m")]) == 0
    assert seen["seed"] == 2**64 - 1


@pytest.mark.parametrize("command", ["train", "explain", "sft", "rm", "dpo", "label", "eval", "serve-reward"])
def test_override_examples_are_valid_fields_the_command_reads(tmp_path, capsys, command):
    """Every command offered `rollout.n=8 algorithm.kl_coef=0.01` as its example, fields that
    `rlxf sft`, `rm` and `dpo` never read; each example now loads, and names the command's section."""
    from rlxf.config import load_config

    match = re.search(r"Dotted overrides, e\.g\. (.+?)\.(?: |$)", _help(capsys, command))
    assert match is not None
    example = match.group(1).split()
    config = tmp_path / "c.yaml"
    config.write_text("model: {path: models/x}\ndata: {task: arithmetic}\n")
    load_config(config, example)
    own = {"sft": "sft.", "rm": "rm.", "dpo": "dpo.", "label": "label.", "eval": "eval.", "serve-reward": "reward."}
    if command in own:
        assert example[0].startswith(own[command]), example
        assert not any(o.startswith("algorithm.") for o in example), example


def test_generate_refuses_several_greedy_samples(tmp_path, capsys):
    """`rlxf generate MODEL "12+34=" -n 3` (temperature 0, the default) printed the one greedy
    response three times as three "samples"; refused before the model is loaded, naming the fix."""
    assert main(["generate", str(tmp_path / "not-loaded"), "12+34=", "-n", "3"]) == 2
    err = capsys.readouterr().err
    assert "-n 3 at --temperature 0" in err and "--temperature 1" in err

"""`rlxf explain` refuses what `rlxf train` refuses of the model section before loading the model
(model.revision on a local directory, a missing model.tokenizer or chat template file), with the
same message and exit code 2; what only this machine lacks (Ray) is a warning."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlxf.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "grpo_arithmetic.yaml"


def _problem(err: str) -> str:
    """The one problem line of an invalid-config error."""
    [line] = [line for line in err.splitlines() if line.startswith("  - ")]
    return line


@pytest.mark.parametrize("override, says", [
    ("model.revision=v1", "is a local directory, so model.revision='v1' cannot apply to it"),
    ("model.tokenizer={tmp}/no-tokenizer", "model.tokenizer {tmp}/no-tokenizer does not exist"),
    ("model.chat_template={tmp}/chat.jinja", "is neither Jinja text (it has no '{{') nor an existing file"),
])
def test_explain_refuses_what_train_refuses(nano_model_dir, tmp_path, capsys, override, says):
    args = [str(EXAMPLE), f"model.path={nano_model_dir}", override.format(tmp=tmp_path)]
    assert main(["train", *args, f"run.output_dir={tmp_path / 'runs'}"]) == 2
    refused = _problem(capsys.readouterr().err)
    assert says.format(tmp=tmp_path) in refused
    assert main(["explain", *args]) == 2
    assert _problem(capsys.readouterr().err) == refused


def test_a_model_not_made_yet_is_still_explained(tmp_path, capsys):
    # model.revision is not checked against a directory that is not there: the memory estimate says why
    assert main(["explain", str(EXAMPLE), f"model.path={tmp_path / 'qs' / 'sft'}", "model.revision=v1"]) == 0
    assert "memory estimate skipped" in capsys.readouterr().out


def test_ray_missing_here_is_a_warning(tmp_path, capsys, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["explain", str(EXAMPLE), f"model.path={tmp_path / 'not-yet'}", "run.placement=ray"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "warning: run.placement=ray needs Ray, which is not installed here: `rlxf train` stops on it" in out


def test_a_hub_model_out_of_reach_is_still_explained(monkeypatch, capsys):
    # the recipes name hub models: explain plans a run on a machine that cannot reach the hub
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert main(["explain", str(EXAMPLE), "model.path=rlxf-test/not-in-any-cache"]) == 0
    assert "memory estimate skipped" in capsys.readouterr().out


def test_a_file_for_the_model_is_refused_as_train_refuses_it(tmp_path, capsys):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    assert main(["explain", str(EXAMPLE), f"model.path={weights}"]) == 2
    assert "is a file; give the directory that holds config.json" in _problem(capsys.readouterr().err)

"""`rlxf explain` reads model.path as `rlxf train` does: a run or checkpoint directory (what every
example's model.path is) gives the memory estimate, and no hint sends a run to `rlxf init-model`
(whose --overwrite would delete it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlxf.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo_arithmetic.yaml"


def _memory_part(out: str) -> str:
    return " ".join(out[out.index("memory estimate"):out.index("placement:")].split())


@pytest.fixture(scope="module")
def sft_run(nano_model_dir, tmp_path_factory) -> Path:
    """qs/sft as `rlxf quickstart qs` leaves it: config.yaml and the model at checkpoints/step_N/model."""
    run = tmp_path_factory.mktemp("qs") / "sft"
    shutil.copytree(nano_model_dir, run / "checkpoints" / "step_300" / "model")
    (run / "config.yaml").write_text("run: {name: sft}\n")
    return run


@pytest.mark.parametrize("where", ["", "checkpoints/step_300"])
def test_a_run_or_checkpoint_directory_gives_the_memory_estimate(sft_run, where, capsys):
    assert main(["explain", str(EXAMPLE), f"model.path={sft_run / where}"]) == 0
    memory = _memory_part(capsys.readouterr().out)
    assert "model: 361,024 parameters, 2 layers, hidden 64" in memory
    assert "skipped" not in memory


def test_a_run_without_a_model_is_not_sent_to_init_model(tmp_path, capsys):
    for run in (tmp_path / "started", tmp_path / "sft"):   # sft: the quickstart's name
        (run / "checkpoints").mkdir(parents=True)
        (run / "config.yaml").write_text("run: {name: x}\n")
        (run / "train.log").write_text("")
    (tmp_path / "nocheckpoints").mkdir()
    (tmp_path / "nocheckpoints" / "config.yaml").write_text("run: {name: x}\n")
    for run, says in ((tmp_path / "started", "without any saved model yet"),
                      (tmp_path / "sft", "without any saved model yet"),
                      (tmp_path / "nocheckpoints", "holds no model")):
        assert main(["explain", str(EXAMPLE), f"model.path={run}"]) == 0
        memory = _memory_part(capsys.readouterr().out)
        assert "memory estimate skipped" in memory and says in memory, run
        assert "init-model" not in memory and "quickstart" not in memory, run


def test_a_missing_path_still_gets_the_hint(tmp_path, capsys):
    assert main(["explain", str(EXAMPLE), f"model.path={tmp_path / 'qs' / 'sft'}"]) == 0
    memory = _memory_part(capsys.readouterr().out)
    assert "does not exist" in memory and f"rlxf quickstart {tmp_path / 'qs'}" in memory

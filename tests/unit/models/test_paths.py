"""One rule for model locations (issue 17.9): model, checkpoint and run directories resolve."""

from __future__ import annotations

import pytest

from rlxf.models.paths import ModelLocation, ModelPathError, resolve_model_dir


def _model(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_model_dir_is_itself(tmp_path):
    m = _model(tmp_path / "mine")
    assert resolve_model_dir(m) == ModelLocation(m, None, None)


def test_checkpoint_dir_and_its_model_name_the_run_and_step(tmp_path):
    run = tmp_path / "runs" / "x"
    m = _model(run / "checkpoints" / "step_20" / "model")
    expected = ModelLocation(m, run, 20)
    assert resolve_model_dir(run / "checkpoints" / "step_20") == expected
    assert resolve_model_dir(m) == expected


def test_run_dir_is_its_newest_checkpoint_with_a_model(tmp_path):
    run = tmp_path / "x"
    _model(run / "checkpoints" / "step_5" / "model")
    newest = _model(run / "checkpoints" / "step_40" / "model")
    (run / "checkpoints" / "step_100").mkdir()         # being written: no model yet
    _model(run / "checkpoints" / "step_9" / "model")  # numeric order, not text order
    assert resolve_model_dir(run) == ModelLocation(newest, run, 40)
    assert resolve_model_dir(str(run)) == ModelLocation(newest, run, 40)


def test_loose_dir_with_model_subdir(tmp_path):
    m = _model(tmp_path / "exported" / "model")
    assert resolve_model_dir(tmp_path / "exported") == ModelLocation(m, None, None)


def test_run_without_checkpoints_says_so(tmp_path):
    (tmp_path / "x" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ModelPathError, match=r"run directory without any saved model.*checkpoint.every"):
        resolve_model_dir(tmp_path / "x")


def test_unrelated_dir_names_the_three_layouts(tmp_path):
    with pytest.raises(ModelPathError, match=r"holds no model.*config.json.*model/config.json.*checkpoints/step_N"):
        resolve_model_dir(tmp_path)

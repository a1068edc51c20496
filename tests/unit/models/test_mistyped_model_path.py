"""A mistyped local model path of the form `a/b` (`models/nan0` next to `models/nano`) is refused
at once, naming the local directory, instead of a minute of Hugging Face hub retries."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import huggingface_hub.constants
import pytest

from rlxf.cli.main import main
from rlxf.models.loading import ModelLoadError, check_source, load_model

EXAMPLE = Path(__file__).parents[3] / "examples" / "grpo_arithmetic.yaml"


@pytest.fixture
def in_dir_with_models(tmp_path, monkeypatch):
    """cwd holds `models/nano/` (a model) and no hub cache entries; the hub is unreachable, so a
    test that reached it would fail at once instead of retrying."""
    (tmp_path / "models" / "nano").mkdir(parents=True)
    (tmp_path / "models" / "nano" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def test_a_missing_subdirectory_of_a_local_directory_is_refused(in_dir_with_models):
    with pytest.raises(ModelLoadError) as e:
        check_source("models/nan0", "model.path")
    msg = str(e.value)
    assert msg.startswith("model.path models/nan0 does not exist")
    assert "no directory 'nan0' in the local directory models/" in msg and "Did you mean models/nano?" in msg
    assert "hf download models/nan0" in msg


def test_load_model_fails_before_any_hub_request(in_dir_with_models, monkeypatch):
    import transformers

    def no_hub(*args, **kwargs):
        raise AssertionError("from_pretrained was called: the hub would be tried")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_hub)
    with pytest.raises(ModelLoadError, match="no directory 'nan0'"):
        load_model("models/nan0")


def test_train_says_so_with_exit_code_2(in_dir_with_models, capsys):
    start = time.monotonic()
    assert main(["train", str(EXAMPLE), "model.path=models/nan0", "run.output_dir=runs"]) == 2
    err = capsys.readouterr().err
    assert "model.path models/nan0 does not exist" in err and "Did you mean models/nano?" in err
    assert time.monotonic() - start < 30
    assert not (in_dir_with_models / "runs").exists()


def test_hub_ids_are_left_alone(in_dir_with_models):
    # no local `someorg/`: a hub id, whatever the hub says later
    assert check_source("someorg/some-model", "model.path") == "someorg/some-model"
    # `models/` is local, but the hub model `models/cached` is in the cache: used from there
    repo = in_dir_with_models / "hf-cache" / "models--models--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    assert check_source("models/cached", "model.path") == "models/cached"
    # a command line's local_first path is never a hub id
    with pytest.raises(ModelLoadError, match="no directory 'cached'"):
        check_source("models/cached", "model", local_first=True)


def test_an_existing_local_path_still_resolves(in_dir_with_models):
    assert check_source("models/nano", "model.path") == "models/nano"


def test_a_run_not_made_yet_is_not_tried_on_the_hub(tmp_path, monkeypatch):
    """runs/NAME (rlxf's own output directory) with no local runs/ was tried as a hub id: half a
    minute of retries offline (`rlxf explain examples/mixture_reasoning_gym.yaml` before its SFT)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError, match=r"runs/mixture-sft is where an rlxf run named 'mixture-sft' writes"):
        check_source("runs/mixture-sft", "model.path")

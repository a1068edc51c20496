"""A hub id with the hub out of reach: huggingface_hub retried for about 50 s before rlxf's
error. Now the hub is asked once: a cached model is read from the cache, another is refused at
once. The network is faked here (name resolution fails), so nothing waits."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import huggingface_hub.constants
import huggingface_hub.utils
import pytest

from rlxf.cli.main import main
from rlxf.models.loading import ModelLoadError, check_source, load_tokenizer

EXAMPLE = Path(__file__).parents[3] / "examples" / "grpo_arithmetic.yaml"


@pytest.fixture
def no_network(tmp_path, monkeypatch):
    """An empty hub cache, not offline mode, and no name resolves (as on a machine without network)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sys, "path", list(sys.path))

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    return tmp_path


def _cache(root: Path, repo: str, revision: str = "main") -> Path:
    """A hub cache entry for ``repo`` as `hf download` leaves it; returns its snapshot directory."""
    entry = root / "hf-cache" / f"models--{repo.replace('/', '--')}"
    (entry / "refs").mkdir(parents=True)
    (entry / "refs" / revision).write_text("abc123")
    snapshot = entry / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    return snapshot


def test_an_uncached_hub_id_is_refused_before_any_download(no_network, monkeypatch):
    import transformers

    def no_hub(*args, **kwargs):
        raise AssertionError("from_pretrained was called: it would retry the hub for a minute")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_hub)
    with pytest.raises(ModelLoadError) as e:
        load_tokenizer("someorg/some-model", what="model.tokenizer")
    msg = str(e.value)
    assert msg.startswith("model.tokenizer someorg/some-model: no such local directory, so it is a Hugging Face hub id")
    assert "cannot be reached from this machine" in msg and "Name or service not known" in msg
    assert "hf download someorg/some-model" in msg and str(no_network / "hf-cache") in msg


def test_a_cached_hub_id_is_read_from_the_cache(no_network):
    snapshot = _cache(no_network, "someorg/cached")
    assert check_source("someorg/cached", "model.path") == str(snapshot)
    # another revision is not what the cache holds: refused, naming it
    with pytest.raises(ModelLoadError, match="someorg/cached at revision 'v2' is not in the local cache"):
        check_source("someorg/cached", "model.path", revision="v2")


def test_a_reachable_hub_is_left_to_download(no_network, monkeypatch):
    asked = []

    class Session:
        def head(self, url, timeout):
            asked.append(url)

    monkeypatch.setattr(huggingface_hub.utils, "get_session", Session)
    assert check_source("someorg/some-model", "model.path") == "someorg/some-model"
    assert asked == [huggingface_hub.constants.ENDPOINT]
    # offline mode asks nothing: transformers reads the cache itself
    asked.clear()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert check_source("someorg/some-model", "model.path") == "someorg/some-model"
    assert asked == []


def test_train_says_so_with_exit_code_2(no_network, capsys):
    assert main(["train", str(EXAMPLE), "model.path=someorg/some-model", "run.output_dir=runs"]) == 2
    err = capsys.readouterr().err
    assert "model.path someorg/some-model: no such local directory" in err and "cannot be reached" in err
    assert not (no_network / "runs").exists()

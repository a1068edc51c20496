"""Shared fixtures: built-in models only (each built once per test session)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer_for_tests():
    """The built-in 4096-token tokenizer (trained once per session, ~3 s)."""
    from rlxf.models.tokenizer import train_tokenizer

    return train_tokenizer()


@pytest.fixture(scope="session")
def nano_model_dir(tmp_path_factory, tokenizer_for_tests):
    """A directory holding the `nano` preset (seed 0): Qwen2, hidden 64, 2 layers, 361k params.

    Read-only by convention: copy it before changing anything inside.
    """
    from rlxf.models.factory import init_model

    return init_model("nano", tmp_path_factory.mktemp("nano") / "model", seed=0, tokenizer=tokenizer_for_tests)

"""Shared fixtures: built-in models only (each built once per test session)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent


def _registries_kept():
    """Restore the algorithm registries as they are now when the caller resumes, and forget the
    test-local plugin modules imported meanwhile, so the next user imports (registers) afresh."""
    from rlxf.algorithms import registry

    saved = {kind: dict(fns) for kind, fns in registry._REGISTRIES.items()}
    modules = set(sys.modules)
    yield
    for kind, fns in saved.items():
        registry._REGISTRIES[kind].clear()
        registry._REGISTRIES[kind].update(fns)
    for name in set(sys.modules) - modules:
        path = getattr(sys.modules[name], "__file__", None) or ""
        if path and Path(path).resolve().is_relative_to(_TESTS):
            del sys.modules[name]


@pytest.fixture(autouse=True, scope="module")
def _isolated_registries_per_module():
    """What a module-scoped fixture registers (a baseline run importing `rl_plugins`, say) is
    gone after the module: the per-test restore below would keep it, as it was there before."""
    yield from _registries_kept()


@pytest.fixture(autouse=True)
def _isolated_registries():
    """Plugins a test registers (e.g. the `nan_for_tests` advantage) vanish after it."""
    yield from _registries_kept()


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

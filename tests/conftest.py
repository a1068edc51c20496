"""Shared fixtures: built-in models only (each built once per test session)."""

from __future__ import annotations

import sys
import types
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


# ChatML, with tool messages rendered as tool-using templates render them: the called tool's name
# with the result (Hermes-style templates; vLLM's raises without it), the call's id (Mistral's),
# and an assistant message's OpenAI `tool_calls` in the template's own layout (Qwen2.5's).
TOOL_MESSAGE_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}"
    "{%- if m.name is not defined or m.tool_call_id is not defined %}"
    "{{- raise_exception('a tool message needs the name and tool_call_id of its call') }}{%- endif %}"
    "{{- '<|im_start|>tool\\n<tool_response>\\n' + {'name': m.name, 'id': m.tool_call_id, 'content': m.content}"
    " | tojson + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls is defined %}"
    "{{- '<|im_start|>assistant' }}{%- for c in m.tool_calls %}"
    "{{- '\\n<tool_call>\\n' + c.function | tojson + '\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="session")
def tool_template_tokenizer(tokenizer_for_tests):
    """The built-in tokenizer with ``TOOL_MESSAGE_TEMPLATE`` as its chat template."""
    import copy

    tok = copy.deepcopy(tokenizer_for_tests)
    tok.chat_template = TOOL_MESSAGE_TEMPLATE
    return tok


def answering_serve(recipe, weights, version, commands, connection, parent) -> None:
    """A miniature of ``rlxf.rollout.process.serve``, no model: every group is answered with no
    completions, every weight version loaded at once."""
    from rlxf.rollout import process

    process._die_with(parent)
    connection.send(("loaded", version))
    while (command := commands.get())[0] != "close":
        if command[0] == "generate":
            connection.send(("group", command[1], []))
        elif command[0] == "weights":
            connection.send(("loaded", command[1]))
    connection.close()


@pytest.fixture
def forked_engine(monkeypatch):
    """``forked_engine(serve)``: an ``EngineProcess`` whose process runs ``serve`` -- a test's
    miniature of ``rlxf.rollout.process.serve``, no model (``answering_serve`` by default) --
    forked, not spawned: milliseconds."""
    import multiprocessing

    from rlxf.rollout import process

    made = []

    def make(serve=answering_serve):
        monkeypatch.setattr(process, "serve", serve)
        monkeypatch.setattr(process.mp, "get_context", lambda method: multiprocessing.get_context("fork"))
        # a recipe with what the parent reads of it (the vocabulary its requests are checked against)
        recipe = types.SimpleNamespace(hf_config=types.SimpleNamespace(vocab_size=1000),
                                       rollout=types.SimpleNamespace(backend="forked"))
        made.append(process.EngineProcess(recipe, []))
        return made[-1]

    yield make
    for engine in made:
        engine.close()

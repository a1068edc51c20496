"""A plugin of the user's that Python would not import: one named like a standard-library module,
and a second run's module of the same name as the first run's, from another folder. Both were
imported silently as the other module; both are now config errors saying which file Python
imports instead and what to do."""

from __future__ import annotations

import sys

import pytest

from rlxf.config import ConfigError, load_config

BASE = {"model": {"path": "tiny"}, "data": {"source": "task", "task": "arithmetic"}}


@pytest.fixture(autouse=True)
def own_import_state(monkeypatch):
    """The folders check_names puts on sys.path, and the modules imported here, go with the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in ("review_shadow_mod",):
        sys.modules.pop(name, None)


def test_a_plugin_named_like_a_standard_library_module_is_refused_naming_both(tmp_path, monkeypatch):
    (tmp_path / "calendar.py").write_text("WHO = 'mine'\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_config(None, base={**BASE, "plugins": ["calendar"]})
    message = str(err.value)
    assert f"plugin 'calendar': {tmp_path / 'calendar.py'} is not the module Python imports as 'calendar'" in message
    assert f"that is {sys.modules['calendar'].__file__}, the standard library's" in message
    assert "Rename calendar.py (and 'calendar' in the config)" in message
    assert not hasattr(sys.modules["calendar"], "WHO")


def test_a_standard_library_module_listed_as_a_plugin_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"plugins\.0.*plugin 'types': 'types' is the standard library's module "
                                          r"\(.*types\.py\), not one of yours.*\(e\.g\. my_types\)"):
        load_config(None, base={**BASE, "plugins": ["types"]})


def test_a_second_run_from_another_folder_does_not_get_the_first_folders_module(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "review_shadow_mod.py").write_text(f"WHO = {folder.name!r}\n")
    cfg = {**BASE, "plugins": ["review_shadow_mod"]}
    monkeypatch.chdir(first)
    load_config(None, base=cfg)
    assert sys.modules["review_shadow_mod"].WHO == "first"
    load_config(None, base=cfg)   # the same folder again: its own module, nothing to refuse
    monkeypatch.chdir(second)
    with pytest.raises(ConfigError) as err:
        load_config(None, base=cfg)
    message = str(err.value)
    assert (f"plugin 'review_shadow_mod': {second / 'review_shadow_mod.py'} is not the module Python imports as "
            f"'review_shadow_mod': that is {first / 'review_shadow_mod.py'}") in message
    assert "or run this config in a new Python process" in message

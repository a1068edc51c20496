"""Overrides of text fields keep the text as written: YAML would read `0123` as the octal 83,
`off` as false and `Format: 42` as a mapping, none of which is a valid string."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlxf.config import ConfigError, load_config, parse_override

EXAMPLE = Path(__file__).parents[3] / "examples" / "grpo_arithmetic.yaml"


@pytest.fixture(autouse=True)
def _isolated_path(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading appends the config's directory


@pytest.mark.parametrize(("override", "get", "expected"), [
    ("data.system_prompt=Answer with a number. Format: 42", lambda c: c.data.system_prompt,
     "Answer with a number. Format: 42"),
    ("run.name=0123", lambda c: c.run.name, "0123"),
    ("data.fields.prompt=off", lambda c: c.data.fields.prompt, "off"),
    ("run.name=2024-01-01", lambda c: c.run.name, "2024-01-01"),
    ("data.system_prompt=[Be brief] then answer", lambda c: c.data.system_prompt, "[Be brief] then answer"),
    ("reward.verifiers.0.name=007", lambda c: c.reward.verifiers[0].name, "007"),
])
def test_a_text_field_keeps_the_text_as_written(override, get, expected):
    assert get(load_config(EXAMPLE, [override])) == expected


def test_nulls_and_quoted_text_are_read_as_yaml():
    assert load_config(EXAMPLE, ["data.system_prompt=null"]).data.system_prompt is None
    assert load_config(EXAMPLE, ["data.system_prompt="]).data.system_prompt is None
    assert load_config(EXAMPLE, ['data.system_prompt="a: b"']).data.system_prompt == "a: b"
    assert parse_override("run.name='x'") == (["run", "name"], "x")


def test_fields_of_other_types_are_still_yaml():
    # YAML 1.1 would read 010 as the octal 8: refused, saying so (test_config_review17)
    with pytest.raises(ConfigError, match=r"leading zero.*octal number \(8\)"):
        parse_override("rollout.n=010")
    assert parse_override("algorithm.dynamic_sampling=off") == (["algorithm", "dynamic_sampling"], False)
    assert parse_override("data.task_options.x=0x1f") == (["data", "task_options", "x"], 31)  # free-form
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_override("rollout.n=[1")
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_override("data.task_options.x=[1")
    with pytest.raises(ConfigError, match=r"rollout.n .*valid integer"):
        load_config(EXAMPLE, ["rollout.n=eight"])

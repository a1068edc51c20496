"""rlxf.api's argument handling: merging sections, prompts as records, reward names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlxf.api import _data_section, _merge, _records, _reward_names
from rlxf.config import ConfigError


def test_sections_merge_field_by_field():
    base = {"rollout": {"n": 4, "temperature": 1.0}, "run": {"name": "a"}}
    assert _merge(base, {"rollout": {"n": 8}, "train": {"steps": 3}}) == {
        "rollout": {"n": 8, "temperature": 1.0}, "run": {"name": "a"}, "train": {"steps": 3}}
    assert base["rollout"]["n"] == 4  # the caller's dict is not changed


def test_prompts_become_records_and_fields_follow_them(tmp_path):
    rows = _records(["1+1=", {"prompt": "2+2=", "answer": "4", "level": 1}], "prompts")
    assert rows == [{"prompt": "1+1="}, {"prompt": "2+2=", "answer": "4", "level": 1}]
    with pytest.raises(ConfigError, match=r"prompts\[0\] has no 'answer' but prompts\[1\] has one"):
        _data_section({}, {"train": rows}, tmp_path)   # the field is read from every row once one has it
    rows[0]["answer"] = "2"
    section = _data_section({}, {"train": rows}, tmp_path)
    assert section["train_path"] == str(tmp_path / "train.jsonl") and section["test_path"] is None
    assert section["fields"] == {"prompt": "prompt", "messages": None, "ground_truth": "answer"}
    chat = _data_section({}, {"train": [{"prompt": [{"role": "user", "content": "hi"}]}]}, tmp_path)
    assert chat["fields"] == {"prompt": None, "messages": "prompt", "ground_truth": None}
    assert "fields" not in _data_section({"fields": {"prompt": "q"}}, {"train": rows}, tmp_path)


def test_bad_prompts_are_named():
    with pytest.raises(ConfigError, match=r"prompts\[0\] cannot be saved as JSON"):
        _records([{"prompt": "x", "extra": object()}], "prompts")
    with pytest.raises(ConfigError, match="eval_prompts is empty"):
        _records([], "eval_prompts")


def test_reward_names_are_distinct_identifiers():
    def exact(sample):
        return 1.0

    assert _reward_names([exact, lambda s: 0.0, exact]) == ["exact", "reward_1", "exact_2"]


def test_import_rlxf_stays_cheap():
    """`rlxf.train` is reachable from `import rlxf` without importing torch until it runs."""
    code = "import sys, rlxf; print(callable(rlxf.train), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parents[2], check=True)
    assert out.stdout.split() == ["True", "False"]

"""On resume, rlxf.train's prompts are checked against the run's saved file before any write."""

from __future__ import annotations

import pytest

from rlxf.api import _check_saved_prompts, _write_jsonl
from rlxf.config import ConfigError


def test_saved_prompts_match_as_records(tmp_path):
    path = tmp_path / "prompts" / "train.jsonl"
    _check_saved_prompts(path, [{"prompt": "a"}])  # nothing saved: nothing to keep
    _write_jsonl(path, [{"prompt": "1+1=", "answer": "2", "tags": ("x", "y")}, {"prompt": "é"}])
    _check_saved_prompts(path, [{"tags": ["x", "y"], "answer": "2", "prompt": "1+1="}, {"prompt": "é"}])
    with pytest.raises(ConfigError, match=r"row 1 is \{\"prompt\": \"e\"\}.*nothing was changed"):
        _check_saved_prompts(path, [{"prompt": "1+1=", "answer": "2", "tags": ["x", "y"]}, {"prompt": "e"}])
    with pytest.raises(ConfigError, match="1 rows given, 2 rows saved"):
        _check_saved_prompts(path, [{"prompt": "1+1="}])
    path.write_text("{not json\n")
    with pytest.raises(ConfigError, match=f"cannot read the run's saved prompts {path}"):
        _check_saved_prompts(path, [{"prompt": "a"}])

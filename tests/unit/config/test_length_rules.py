"""Config rules about cut-off responses that would silently do nothing, or mask everything."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlxf.config import Config

BASE = {"model": {"path": "m"}, "data": {"task": "arithmetic"}}


def _config(algorithm: dict, rollout: dict) -> Config:
    return Config.model_validate({**BASE, "algorithm": algorithm, "rollout": rollout})


def test_an_overlong_buffer_under_one_token_is_refused_naming_both_fields():
    with pytest.raises(ValidationError, match=r"overlong_buffer=0.1 of rollout.max_new_tokens=8 is less than one token"):
        _config({"overlong_buffer": 0.1}, {"max_new_tokens": 8})
    assert _config({"overlong_buffer": 0.125}, {"max_new_tokens": 8}).algorithm.overlong_buffer == 0.125
    assert _config({"overlong_buffer": 0.1, "overlong_penalty": 0.0}, {"max_new_tokens": 8})   # penalty off


def test_masking_truncated_responses_when_every_response_is_truncated_is_refused():
    with pytest.raises(ValidationError, match="nothing would train"):
        _config({"mask_truncated": True}, {"ignore_eos": True})
    assert _config({"mask_truncated": True}, {"ignore_eos": True, "stop_strings": ["\n"]})
    assert _config({"mask_truncated": False}, {"ignore_eos": True})


def test_a_negative_stop_token_id_is_refused_at_load_naming_the_field():
    with pytest.raises(ValidationError, match=r"rollout.stop_token_ids.0"):
        _config({}, {"stop_token_ids": [-1]})

"""Preference pairs whose chosen and rejected responses are the same tokens state no preference:
they are dropped with a warning that counts them, and a train split of nothing else is an error."""

from __future__ import annotations

import json
import logging

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_preference_data


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_identical_pairs_are_dropped_with_a_counted_warning(tmp_path, tokenizer_for_tests, caplog):
    train = _jsonl(tmp_path / "train.jsonl", [
        {"prompt": "1+1=", "chosen": "2", "rejected": "3"},
        {"prompt": "2+2=", "chosen": "4", "rejected": "4"},
        {"prompt": "3+3=", "chosen": "six apples", "rejected": "six pears"},   # the same once truncated
    ])
    test = _jsonl(tmp_path / "test.jsonl", [{"prompt": "5+5=", "chosen": "10", "rejected": "10"}])
    cfg = DataConfig(source="jsonl", train_path=train, test_path=test, max_response_len=1,
                     overlong_prompt="truncate")
    with caplog.at_level(logging.WARNING):
        data = build_preference_data(cfg, tokenizer_for_tests, 0)
    assert [(p.chosen_text, p.rejected_text) for p in data.train] == [("2", "3")]
    assert data.test == []
    assert data.report["train_dropped_identical"] == 2 and data.report["test_dropped_identical"] == 1
    warning = "\n".join(r.getMessage() for r in caplog.records)
    assert "dropped 2 of 3 train pairs whose chosen and rejected responses are the same tokens " \
           "(after truncation to data.max_response_len=1): they state no preference" in warning
    assert "dropped 1 of 1 test pairs" in warning


def test_no_train_pair_with_a_preference_is_an_error(tmp_path, tokenizer_for_tests):
    train = _jsonl(tmp_path / "train.jsonl", [{"prompt": f"{i}", "chosen": "same", "rejected": "same"}
                                              for i in range(3)])
    with pytest.raises(DataError, match=r"no train pairs left \(train_dropped_identical=3, train_read=3\): 3 have "
                                        r"the same chosen and rejected response, so they state no preference"):
        build_preference_data(DataConfig(source="jsonl", train_path=train), tokenizer_for_tests, 0)

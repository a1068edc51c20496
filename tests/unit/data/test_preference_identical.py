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


def test_already_templated_prompts_are_not_templated_again(tmp_path, tokenizer_for_tests):
    """`rlxf label` writes prompts with the chat template applied; reading them through it again would
    train the RM on prompts nobody else sees."""
    templated = "<|im_start|>user\n1+1=<|im_end|>\n<|im_start|>assistant\n"
    train = _jsonl(tmp_path / "pairs_train.jsonl", [{"prompt": "2+2=", "chosen": "4", "rejected": "5"},
                                                    {"prompt": templated, "chosen": "2", "rejected": "3"}])
    with pytest.raises(DataError, match=r"pairs_train.jsonl:2: the prompt already ends with the chat template's "
                                        r"generation prompt '<\|im_start\|>assistant'.*set data.apply_chat_template: "
                                        r"false"):
        build_preference_data(DataConfig(source="jsonl", train_path=train), tokenizer_for_tests, 0)
    raw = _jsonl(tmp_path / "raw.jsonl", [{"prompt": templated, "chosen": "2", "rejected": "3"}])
    data = build_preference_data(DataConfig(source="jsonl", train_path=raw, apply_chat_template=False),
                                 tokenizer_for_tests, 0)
    assert data.train[0].prompt_ids == tokenizer_for_tests(templated)["input_ids"]


def test_templated_prompts_are_refused_for_rl_and_sft_too(tmp_path, tokenizer_for_tests):
    """The same rule for every reader of prompts (encode_prompts): RL prompts and SFT pairs fed
    `rlxf label`'s prompts were templated twice as well."""
    from rlxf.data import build_prompt_data, build_sft_data

    templated = "<|im_start|>user\n1+1=<|im_end|>\n<|im_start|>assistant\n"
    rl = _jsonl(tmp_path / "rl.jsonl", [{"prompt": "2+2=", "answer": "4"}, {"prompt": templated, "answer": "2"}])
    with pytest.raises(DataError, match=r"rl.jsonl:2: the prompt already ends with the chat template's"):
        build_prompt_data(DataConfig(source="jsonl", train_path=rl), tokenizer_for_tests, 0)
    sft = _jsonl(tmp_path / "sft.jsonl", [{"prompt": templated, "response": "2"}])
    with pytest.raises(DataError, match=r"sft.jsonl:1: the prompt already ends with the chat template's"):
        build_sft_data(DataConfig(source="jsonl", train_path=sft, fields={"response": "response"}),
                       tokenizer_for_tests, 0)

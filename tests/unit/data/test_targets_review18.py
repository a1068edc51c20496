"""Found by the 18th data review: SFT targets of nothing, and preference pairs whose prompt field
is not the conversation their answers were written to."""

from __future__ import annotations

import json
import re

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_preference_data, build_sft_data


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("row, fields, field", [
    ({"prompt": "q2", "response": ""}, {}, "response"),
    ({"prompt": "q2", "response": " \n"}, {}, "response"),
    ({"m": [{"role": "user", "content": "q2"}, {"role": "assistant", "content": [{"type": "text", "text": " "}]}]},
     {"prompt": None, "messages": "m"}, "m[1]"),
])
def test_an_empty_sft_response_is_an_error_naming_line_and_field(tmp_path, tokenizer_for_tests, row, fields, field):
    """An empty CSV cell would train the model to answer with its eos alone."""
    good = {"prompt": "q1", "response": "a", "m": [{"role": "user", "content": "q1"},
                                                   {"role": "assistant", "content": "a"}]}
    path = _jsonl(tmp_path / "sft.jsonl", [good, row])
    with pytest.raises(DataError, match=rf"^{re.escape(path)}:2: field '{re.escape(field)}' holds an empty response"):
        build_sft_data(DataConfig(source="jsonl", train_path=path, fields=fields), tokenizer_for_tests, 0)


def test_an_empty_sft_response_cell_in_csv_is_an_error(tmp_path, tokenizer_for_tests):
    path = tmp_path / "sft.csv"
    path.write_text("prompt,response\nq1,a1\nq2,\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:3: field 'response' holds an empty response"):
        build_sft_data(DataConfig(source="csv", train_path=str(path)), tokenizer_for_tests, 0)


def _conv(*turns):
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]


def test_a_prompt_field_that_drops_the_history_the_answers_follow_is_an_error(tmp_path, tokenizer_for_tests):
    history = ("Capital of France?", "Paris.", "And of Italy?")
    path = _jsonl(tmp_path / "pref.jsonl", [{"prompt": "And of Italy?", "chosen": _conv(*history, "Rome."),
                                             "rejected": _conv(*history, "Paris.")}])
    with pytest.raises(DataError, match=rf"^{re.escape(path)}:1: the prompt in 'prompt' is not the conversation "
                                        r"before the answer in 'chosen' \(3 turn\(s\)\)"):
        build_preference_data(DataConfig(source="jsonl", train_path=path), tokenizer_for_tests, 0)
    # read from the conversation, the prompt holds the whole history
    (ex,) = build_preference_data(DataConfig(source="jsonl", train_path=path, fields={"prompt": "question"}),
                                  tokenizer_for_tests, 0).train
    assert ex.prompt_text == ("<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>\n"
                              "<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n")


def test_a_prompt_field_that_is_the_conversations_question_is_read(tmp_path, tokenizer_for_tests):
    """UltraFeedback's shape: the prompt as text, each answer as [user prompt, assistant answer]."""
    path = _jsonl(tmp_path / "pref.jsonl", [{"prompt": "What is 2+2?", "chosen": _conv("What is 2+2?", "4"),
                                             "rejected": _conv("What is 2+2?", "5")}])
    (ex,) = build_preference_data(DataConfig(source="jsonl", train_path=path), tokenizer_for_tests, 0).train
    assert (ex.prompt_text, ex.chosen_text, ex.rejected_text) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", "4", "5")

"""Chat records take the roles chat templates render (``rlxf.envs.base.ENV_ROLES`` and the
assistant's): OpenAI's "developer", Llama 3.1's "ipython", "tool". A role nobody renders is an
error naming the file, line, field and the fix."""

from __future__ import annotations

import json

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, read_records
from rlxf.data.preference import record_triple
from rlxf.data.prompts import content_key, record_prompt
from rlxf.data.sft import record_pair

TOOL_TURNS = [
    {"role": "developer", "content": "Answer with a number."},
    {"role": "user", "content": "What is 2+3?"},
    {"role": "assistant", "content": None, "tool_calls": [{"type": "function",
                                                           "function": {"name": "calc", "arguments": "{}"}}]},
    {"role": "ipython", "content": "5"},
    {"role": "tool", "content": "5"},
]


def _records(tmp_path, *records) -> list:
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return list(read_records(path, "jsonl"))


def test_developer_ipython_and_tool_turns_are_read_by_every_kind_of_data(tmp_path):
    [(where, rec)] = _records(tmp_path, {"messages": TOOL_TURNS, "answer": "5"})
    prompt, _, _ = record_prompt(rec, where, DataConfig(source="jsonl", train_path="x", fields={"messages": "messages",
                                                                                               "ground_truth": "answer"}))
    assert [m["role"] for m in prompt] == ["developer", "user", "assistant", "ipython", "tool"]

    answered = {"messages": [*TOOL_TURNS, {"role": "assistant", "content": "5"}]}
    [(where, rec)] = _records(tmp_path, answered)
    prompt, response = record_pair(rec, where, DataConfig(source="jsonl", train_path="x", fields={"messages": "messages"}))
    assert (len(prompt), response) == (5, "5")

    pair = {"chosen": answered["messages"], "rejected": [*TOOL_TURNS, {"role": "assistant", "content": "6"}]}
    [(where, rec)] = _records(tmp_path, pair)
    _, chosen, rejected = record_triple(rec, where, DataConfig(source="jsonl", train_path="x"))
    assert (chosen, rejected) == ("5", "6")


def test_a_role_nobody_renders_names_file_line_field_and_the_fix(tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"}]}
    bad = {"messages": [{"role": "human", "content": "hi"}, {"role": "gpt", "content": "hello"}]}
    records = _records(tmp_path, good, bad)
    cfg = DataConfig(source="jsonl", train_path="x", fields={"messages": "messages", "ground_truth": None})
    with pytest.raises(DataError) as e:
        for where, rec in records:
            record_prompt(rec, where, cfg)
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'chats.jsonl'}:2: messages[0] has role 'human'; valid roles: ")
    assert "developer" in message and "ipython" in message and "'user'" in message


def test_a_developer_turn_is_instruction_like_a_system_turn():
    # held out by content: the same question with OpenAI's instruction turn is the same prompt
    question = [{"role": "user", "content": "What is 2+3?"}]
    assert content_key([{"role": "developer", "content": "Be brief."}, *question]) == content_key("What is 2+3?")
    # and a conversation of instructions alone asks nothing
    cfg = DataConfig(source="jsonl", train_path="x", fields={"messages": "messages", "ground_truth": None})
    with pytest.raises(DataError, match=r"w:1: field 'messages' holds an empty prompt"):
        record_prompt({"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": " "}]},
                      "w:1", cfg)


def test_a_chat_written_as_json_text_in_a_csv_is_told_how_to_store_it(tmp_path):
    from rlxf.data.errors import DataError
    from rlxf.data.templates import check_messages

    with pytest.raises(DataError) as caught:
        check_messages('[{"role": "user", "content": "1+1?"}]', "data.csv:2", "messages")
    assert "JSON text of a list: a CSV cell holds only text. Write the data as JSONL" in str(caught.value)
    with pytest.raises(DataError) as caught:   # not JSON: no hint to mislead
        check_messages("what is 1+1?", "data.csv:2", "messages")
    assert str(caught.value).endswith("got str")

"""The data layer's guards: held-out prompts never reach training in any
recipe (SFT, preference pairs, a mixture whose sources write prompts differently), and a bad
record's error names its file, line and field instead of surfacing as a TypeError or a template
error."""

from __future__ import annotations

import json

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_preference_data, build_prompt_data, build_sft_data


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_sft_does_not_train_on_a_prompt_of_its_test_file(tmp_path, tokenizer_for_tests):
    """`rlxf sft` evaluates on the test file's prompts; training on one of them would measure a
    memorised answer (RL prompts already drop such overlap: `train_removed_in_test`)."""
    train = _jsonl(tmp_path / "train.jsonl", [{"prompt": "What is 2+2?", "response": "4"},
                                              {"prompt": "What is 3+3?", "response": "6"}])
    test = _jsonl(tmp_path / "test.jsonl", [{"prompt": "what is  2+2?".replace("w", "W"), "response": "4"}])
    data = build_sft_data(DataConfig(source="jsonl", train_path=train, test_path=test), tokenizer_for_tests, 0)
    assert [e.response_text for e in data.train] == ["6"]
    assert data.report["train_removed_in_test"] == 1 and data.report["train"] == 1


def test_preference_training_drops_pairs_whose_prompt_is_held_out(tmp_path, tokenizer_for_tests):
    train = _jsonl(tmp_path / "train.jsonl", [{"prompt": "say 1", "chosen": "A", "rejected": "b"},
                                              {"prompt": "say 2", "chosen": "C", "rejected": "d"}])
    test = _jsonl(tmp_path / "test.jsonl", [{"prompt": "say 1", "chosen": "A", "rejected": "b"}])
    data = build_preference_data(DataConfig(source="jsonl", train_path=train, test_path=test),
                                 tokenizer_for_tests, 0)
    assert [e.prompt_text.count("say 2") for e in data.train] == [1]
    assert data.report["train_removed_in_test"] == 1


@pytest.mark.parametrize("build", [build_sft_data, build_preference_data])
def test_a_training_file_that_is_all_held_out_is_named_as_such(tmp_path, tokenizer_for_tests, build):
    """Every train prompt held out (the test file is the training file): the error says so, not
    that the length limits or identical pairs emptied it."""
    rows = [{"prompt": "say 1", "response": "1", "chosen": "A", "rejected": "A"},
            {"prompt": "say 2", "response": "2", "chosen": "B", "rejected": "b"}]
    same = _jsonl(tmp_path / "both.jsonl", rows)
    with pytest.raises(DataError, match=r"(?s)removed because their prompts are held-out.*not be the training file"):
        build(DataConfig(source="jsonl", train_path=same, test_path=same), tokenizer_for_tests, 0)


@pytest.mark.parametrize("build", [build_prompt_data, build_sft_data])
def test_a_held_out_text_prompt_is_kept_out_of_a_source_that_writes_it_as_messages(tmp_path, tokenizer_for_tests,
                                                                                  build):
    """Source a holds out "What is 7+7?" as text; source b has it as one user message (with a
    system turn): the same question, so it is removed from b's training prompts."""
    a_train = _jsonl(tmp_path / "a_train.jsonl", [{"prompt": "What is 5+5?", "response": "10"}])
    a_test = _jsonl(tmp_path / "a_test.jsonl", [{"prompt": "What is 7+7?", "response": "14"}])
    b_train = _jsonl(tmp_path / "b_train.jsonl", [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 7+7?"}],
         "response": "14"},
        {"messages": [{"role": "user", "content": "What is 9+9?"}], "response": "18"},
    ])
    cfg = DataConfig(sources=[
        {"name": "a", "source": "jsonl", "train_path": a_train, "test_path": a_test,
         "fields": {"ground_truth": None}},
        {"name": "b", "source": "jsonl", "train_path": b_train,
         "fields": {"ground_truth": None, "prompt": None, "messages": "messages"}},
    ])
    data = build(cfg, tokenizer_for_tests, 0)
    trained = " ".join(p.prompt_text for p in data.train)
    assert "7+7" not in trained and "9+9" in trained and "5+5" in trained
    assert data.report["b/train_removed_held_out"] == 1


@pytest.mark.parametrize("kind, line, fields, message", [
    ("sft", {"prompt": 5, "response": "x"}, {}, "field 'prompt' (data.fields.prompt) must be text or a list"),
    ("sft", {"prompt": None, "response": "x"}, {}, "got NoneType"),
    ("sft", {"prompt": ["a"], "response": "x"}, {}, "prompt[0] must be an object with 'role' and 'content'"),
    ("pref", {"prompt": ["x"], "chosen": "A", "rejected": "b"}, {}, "prompt[0] must be an object"),
    ("pref", {"prompt": "p", "chosen": None, "rejected": "b"}, {}, "field 'chosen' must be the response text"),
    ("rl", {"messages": [{"role": "user", "content": None}]}, {"prompt": None, "messages": "messages"},
     "messages[0] (user) has content of type NoneType"),
    ("rl", {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
     {"prompt": None, "messages": "messages"}, "cannot render the prompt: the prompt's last message is an assistant"),
])
def test_a_bad_record_names_its_file_line_and_field(tmp_path, tokenizer_for_tests, kind, line, fields, message):
    good = {"sft": {"prompt": "q", "response": "a"}, "pref": {"prompt": "q", "chosen": "A", "rejected": "b"},
            "rl": {"messages": [{"role": "user", "content": "q"}]}}[kind]
    path = _jsonl(tmp_path / "train.jsonl", [good, line])
    cfg = DataConfig(source="jsonl", train_path=path, fields={"ground_truth": None, **fields})
    build = {"sft": build_sft_data, "pref": build_preference_data, "rl": build_prompt_data}[kind]
    with pytest.raises(DataError) as err:
        build(cfg, tokenizer_for_tests, 0)
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value)


@pytest.mark.parametrize("content", [b"", b"\n\n", b"\xef\xbb\xbf"])
def test_an_empty_file_is_named_as_empty_not_as_over_the_length_limit(tmp_path, tokenizer_for_tests, content):
    path = tmp_path / "train.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError, match=rf"{path} holds no train records \(train_read=0: the file is empty"):
        build_prompt_data(DataConfig(source="jsonl", train_path=str(path)), tokenizer_for_tests, 0)

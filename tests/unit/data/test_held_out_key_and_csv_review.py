"""Found by the third data review: the held-out key merged prompts that differ in meaning (x² and
x2) and missed ones that differ only invisibly (a zero-width space); a CSV quote never closed
swallowed the rest of the file into one cell, and a cell over 128 KiB crashed the reader."""

from __future__ import annotations

import json
import unicodedata

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_prompt_data, read_records
from rlxf.data.prompts import content_key


@pytest.mark.parametrize("a, b", [
    ("Simplify x²+1", "Simplify x2+1"),          # a superscript is an exponent
    ("Boil H₂O", "Boil H2O"),                     # a subscript is an index
    ("What is 1½ + 1?", "What is 11⁄2 + 1?"),      # one and a half is not eleven halves
    ("Is ℝ countable?", "Is R countable?"),       # a math alphabet names another set
    ("Find ①", "Find 1"),
    ("Solve for X", "Solve for x"),               # case is kept
])
def test_prompts_that_differ_in_meaning_have_different_keys(a, b):
    assert content_key(a) != content_key(b)


@pytest.mark.parametrize("a, b", [
    ("café au lait", unicodedata.normalize("NFD", "café au lait")),   # composed or decomposed é
    ("What is 2+2?\u200b", "What is 2+2?"),                           # zero-width space
    ("\ufeffWhat is 2+2?", "What is 2+2?"),                           # byte-order mark
    ("co\u00adoperate", "cooperate"),                                 # soft hyphen
    ("I \u2764\ufe0f it", "I \u2764 it"),                             # emoji variation selector
    ("What is\u00a02 + 2?  ", "What is 2 + 2?"),                      # no-break space, trailing spaces
    ("What is ２＋２?", "What is 2+2?"),                               # full-width forms
    ("Deﬁne it", "Define it"),                                        # a ligature
    ("ﾊﾟン", "パン"),                                                  # half-width katakana
])
def test_prompts_that_differ_only_in_presentation_share_a_key(a, b):
    assert content_key(a) == content_key(b)


def _jsonl(path, prompts):
    path.write_text("".join(json.dumps({"prompt": p, "answer": "1"}) + "\n" for p in prompts))
    return str(path)


def test_a_training_prompt_is_removed_only_when_it_reads_as_a_held_out_one(tmp_path, tokenizer_for_tests):
    """x2+1 is held out: x²+1 is another problem and is trained on; the held-out one written with
    a decomposed accent or a zero-width space is not."""
    held = ["Simplify x2+1", "Résumé: what is 3+3?"]
    train = _jsonl(tmp_path / "train.jsonl", ["Simplify x²+1", unicodedata.normalize("NFD", held[1]),
                                              "Simplify x2+1\u200b", "What is 4+4?"])
    test = _jsonl(tmp_path / "test.jsonl", held)
    cfg = DataConfig(source="jsonl", train_path=train, test_path=test, fields={"ground_truth": "answer"},
                     apply_chat_template=False)
    data = build_prompt_data(cfg, tokenizer_for_tests, seed=0)
    assert [p.prompt_text for p in data.train] == ["Simplify x²+1", "What is 4+4?"]
    assert data.report["train_removed_in_test"] == 2


def test_a_csv_quote_never_closed_is_an_error_not_one_cell_holding_the_rest(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('prompt,answer\nq1,"1\nq2,2\nq3,3\n')   # read leniently: one record, answer "1\nq2,2\nq3,3\n"
    with pytest.raises(DataError, match=r"d.csv:2: not valid CSV .*never closed"):
        list(read_records(path, "csv"))


def test_csv_text_after_a_closing_quote_is_an_error_not_a_lost_quote(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('prompt,answer\nok,0\n"He said" hi,1\n')   # read leniently: 'He said hi'
    with pytest.raises(DataError, match=r"d.csv:3: not valid CSV .*text follows a closing quote"):
        list(read_records(path, "csv"))


def test_a_csv_cell_over_128_kib_is_read_in_full(tmp_path):
    path = tmp_path / "d.csv"
    long = "x" * 200_000
    path.write_text(f'prompt,answer\n"{long}",1\n"two\nlines",2\n')
    assert list(read_records(path, "csv")) == [(f"{path}:2", {"prompt": long, "answer": "1"}),
                                               (f"{path}:3", {"prompt": "two\nlines", "answer": "2"})]


def test_rl_prompts_read_a_file_that_mixes_text_and_chat_prompts(tmp_path, tokenizer_for_tests):
    """SFT and preference data take text or messages under data.fields.prompt, record by record;
    RL prompts refused a list there and, told to set data.fields.messages, then refused the text."""
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 3+3?"}]
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps({"prompt": "What is 2+2?", "answer": "4"}) + "\n"
                    + json.dumps({"prompt": chat, "answer": "6"}) + "\n")
    tokenizer_for_tests.chat_template, template = (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:",
        tokenizer_for_tests.chat_template)
    try:
        data = build_prompt_data(DataConfig(source="jsonl", train_path=str(path)), tokenizer_for_tests, seed=0)
    finally:
        tokenizer_for_tests.chat_template = template
    assert [(p.prompt_text, p.ground_truth) for p in data.train] == [
        ("user: What is 2+2?\nassistant:", "4"), ("system: Be brief.\nuser: What is 3+3?\nassistant:", "6")]


def test_a_prompt_that_is_neither_text_nor_messages_names_its_line_and_field(tmp_path, tokenizer_for_tests):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "ok", "answer": "1"}) + "\n" + json.dumps({"prompt": 5, "answer": "2"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: field 'prompt' \(data.fields.prompt\) must be text or a list "
                                        r"of chat messages, got int"):
        build_prompt_data(DataConfig(source="jsonl", train_path=str(path)), tokenizer_for_tests, seed=0)


def test_a_missing_hf_split_names_the_splits_there_are_and_the_setting(tmp_path, tokenizer_for_tests):
    """A data directory with train and validation files: the default data.test_split ('test') is
    not there, and the error says which splits are and which setting picks one."""
    pytest.importorskip("datasets")
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n")
    (tmp_path / "validation.jsonl").write_text(json.dumps({"prompt": "b", "answer": "2"}) + "\n")
    with pytest.raises(DataError, match=r"(?s)no split 'test' .*'train', 'validation'.*Set data.train_split / "
                                        r"data.test_split to one of them \(data.test_split: null"):
        build_prompt_data(DataConfig(source="hf", train_path=str(tmp_path)), tokenizer_for_tests, seed=0)

"""Found by the 20th data review: bad input that crashed far from its record, or failed with an
error that did not say what was wrong: a line holding only a byte-order mark, half of a UTF-16
surrogate pair, a compressed file, an environment variable in a path, a NaN answer."""

from __future__ import annotations

import gzip
import json

import pytest

from rlxf.cli.preflight import data_problems
from rlxf.config import Config
from rlxf.config.data import DataConfig
from rlxf.data import DataError, read_records
from rlxf.data.prompts import record_prompt


def test_a_line_holding_only_a_byte_order_mark_is_blank(tmp_path):
    # files that each begin with a mark, concatenated: an empty one leaves a line of the mark alone
    path = tmp_path / "cat.jsonl"
    path.write_bytes(b'{"prompt": "a"}\r\n\xef\xbb\xbf\r\n\xef\xbb\xbf{"prompt": "b"}\n\xef\xbb\xbf')
    assert list(read_records(path, "jsonl")) == [(f"{path}:1", {"prompt": "a"}), (f"{path}:3", {"prompt": "b"})]


@pytest.mark.parametrize("fmt, where", [("jsonl", ":2"), ("json", " record 1")])
def test_half_a_surrogate_pair_is_named_by_record_and_field(tmp_path, fmt, where):
    # "\ud83d\ude00" is one emoji (read as it is); "\ud83d" alone is half of one, which no tokenizer encodes
    whole = '{"messages": [{"role": "user", "content": "hi \\ud83d\\ude00"}]}'
    cut = '{"messages": [{"role": "user", "content": "hi \\ud83d"}]}'
    path = tmp_path / f"chats.{fmt}"
    path.write_text(f"{whole}\n{cut}\n" if fmt == "jsonl" else f"[{whole},\n{cut}]")
    records = read_records(path, fmt)
    assert next(records)[1]["messages"][0]["content"] == "hi \U0001f600"
    with pytest.raises(DataError) as e:
        next(records)
    assert str(e.value).startswith(f"{path}{where}: field 'messages[0].content' holds \\ud83d at character 3, ")
    assert "Remove the escape" in str(e.value)


def test_a_compressed_file_is_named_as_one(tmp_path):
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"prompt": "a"}\n' * 10))
    with pytest.raises(DataError, match=r"train.jsonl.gz is a gzip archive, not text; decompress it first "
                                        r"\(gunzip -k train.jsonl.gz\)"):
        list(read_records(path, "jsonl"))


def test_an_environment_variable_in_a_path_is_said_to_stay_unexpanded(tmp_path, monkeypatch):
    (tmp_path / "train.jsonl").write_text('{"prompt": "a"}\n')
    monkeypatch.setenv("RLXF_TEST_DATA", str(tmp_path))
    with pytest.raises(DataError) as e:
        list(read_records("$RLXF_TEST_DATA/train.jsonl", "jsonl"))
    assert str(e.value) == (f"data file $RLXF_TEST_DATA/train.jsonl does not exist (data.source=jsonl); environment "
                            f"variables in a path are not expanded: write it out ({tmp_path}/train.jsonl here), or "
                            f"give it as a command-line override, which the shell expands")
    # ~ is expanded
    monkeypatch.setenv("HOME", str(tmp_path))
    assert [r for _, r in read_records("~/train.jsonl", "jsonl")] == [{"prompt": "a"}]
    # `rlxf train` checks the file before it reads it, and says the same
    cfg = Config.model_validate({"model": {"path": "tiny"},
                                 "data": {"source": "jsonl", "train_path": "$RLXF_TEST_DATA/train.jsonl"}})
    assert data_problems(cfg) == [(("data", "train_path"), "data file $RLXF_TEST_DATA/train.jsonl does not exist; "
                                   "environment variables in a path are not expanded: write it out "
                                   f"({tmp_path}/train.jsonl here), or give it as a command-line override, which "
                                   "the shell expands")]


def test_a_nan_answer_is_refused_where_it_is(tmp_path):
    # json.dumps writes a pandas NaN as NaN, and Python reads it back: the exact verifier would reward "nan"
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "answer": 2}) + "\n"
                    + json.dumps({"prompt": "2+2=", "answer": float("nan")}) + "\n")
    cfg = DataConfig(source="jsonl", train_path=str(path))
    records = read_records(path, "jsonl")
    where, record = next(records)
    assert record_prompt(record, where, cfg)[1] == 2
    where, record = next(records)
    with pytest.raises(DataError, match=rf"^{path}:2: field 'answer' \(data.fields.ground_truth\) is NaN: a missing "
                                        r"value .* fill in the answer, or drop the record$"):
        record_prompt(record, where, cfg)

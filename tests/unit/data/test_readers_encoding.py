"""Data files that are not UTF-8, or start with a byte-order mark (Excel's "CSV UTF-8"): the
mark is dropped, and bytes in another encoding are a DataError naming the file, line and byte."""

from __future__ import annotations

import pytest

from rlxf.cli.main import main
from rlxf.data import DataError, read_records

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(("name", "fmt", "content"), [
    ("d.csv", "csv", b"prompt,answer\r\n1+1=,2\r\n"),
    ("d.jsonl", "jsonl", b'{"prompt": "1+1=", "answer": "2"}\n'),
    ("d.json", "json", b'[{"prompt": "1+1=", "answer": "2"}]'),
])
def test_a_leading_byte_order_mark_is_dropped(tmp_path, name, fmt, content):
    (tmp_path / name).write_bytes(BOM + content)
    assert [r for _, r in read_records(tmp_path / name, fmt)] == [{"prompt": "1+1=", "answer": "2"}]


@pytest.mark.parametrize(("name", "fmt", "content", "line"), [
    ("d.jsonl", "jsonl", b'{"prompt": "a", "answer": "1"}\n{"prompt": "caf\xe9", "answer": "2"}\n', 2),
    ("d.json", "json", b'[{"prompt": "a", "answer": "1"},\n\n{"prompt": "caf\xe9", "answer": "2"}]', 3),
    ("d.csv", "csv", b"prompt,answer\nhi,1\nok,2\ncaf\xe9,3\n", 4),
])
def test_latin1_bytes_name_the_file_line_and_byte(tmp_path, name, fmt, content, line):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError) as e:
        list(read_records(path, fmt))
    msg = str(e.value)
    assert f"{path}:{line}" in msg and "0xe9" in msg and "not valid UTF-8" in msg and "Save it as UTF-8" in msg


def test_a_bad_byte_far_into_a_large_file_is_on_its_line(tmp_path):
    # text-mode reads decode in chunks, so the decoder's own position is not the file's
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"prompt": "a\xc3\xa9", "answer": "1"}\n' * 5000 + b'{"prompt": "\xe9"}\n')
    with pytest.raises(DataError, match=rf"{path}:5001, column 13: byte 0xe9"):
        list(read_records(path, "jsonl"))


def test_utf16_is_named(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes("prompt,answer\n1+1=,2\n".encode("utf-16"))
    with pytest.raises(DataError, match="UTF-16"):
        list(read_records(path, "csv"))


def test_the_cli_reports_a_latin1_file_with_exit_code_2(tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    data = tmp_path / "prompts.csv"
    data.write_bytes(b"prompt,answer\nd\xe9j\xe0 1+1=,2\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"model: {{path: {tmp_path / 'no_model'}}}\n"
                      f"data: {{source: csv, train_path: {data}}}\n")
    assert main(["explain", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{data}:2" in err and "0xe9" in err and "UnicodeDecodeError" not in err

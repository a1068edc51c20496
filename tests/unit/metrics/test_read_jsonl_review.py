"""A last record without its newline (a hand-edited or third-party metrics.jsonl) is kept by
readers, by the writer that appends after it and by the resume cut; a torn one is still dropped."""

from __future__ import annotations

from rlxf.metrics.sinks import JsonlWriter, read_jsonl, repair_tail, truncate_after_step

WHOLE = b'{"step": 1, "a": 1}\n{"step": 2, "a": 2}'   # the last line is complete, unterminated
TORN = b'{"step": 1, "a": 1}\n{"step": 2, "a": 2'      # the last line was cut short


def test_reader_keeps_a_whole_unterminated_last_record(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(WHOLE)
    assert read_jsonl(path) == [{"step": 1, "a": 1}, {"step": 2, "a": 2}]
    path.write_bytes(TORN)
    assert read_jsonl(path) == [{"step": 1, "a": 1}]
    path.write_bytes(b'{"step": 1}\n{"step": 2, "s": "\xc3')   # a UTF-8 character cut in two
    assert read_jsonl(path) == [{"step": 1}]


def test_append_after_an_unterminated_record_starts_a_new_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(WHOLE)
    writer = JsonlWriter(path)
    writer.write({"step": 3, "a": 3})
    writer.close()
    assert path.read_bytes() == WHOLE + b'\n{"step": 3, "a": 3}\n'
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3]
    assert repair_tail(path) == 0


def test_resume_cut_keeps_or_drops_an_unterminated_record_by_its_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(WHOLE)
    assert truncate_after_step(path, 2) == 0             # kept, and now ends with its newline
    assert path.read_bytes() == WHOLE + b"\n"
    path.write_bytes(WHOLE)
    assert truncate_after_step(path, 1) == 1             # step 2 is after the checkpoint
    assert path.read_bytes() == b'{"step": 1, "a": 1}\n'
    path.write_bytes(TORN)
    assert truncate_after_step(path, 5) == 0             # a torn tail is still cut off
    assert path.read_bytes() == b'{"step": 1, "a": 1}\n'

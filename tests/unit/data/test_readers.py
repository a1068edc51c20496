"""Readers: every format gives the same records; bad files name the file and line."""

from __future__ import annotations

import json

import pytest

from rlxf.data import DataError, read_records

ROWS = [{"prompt": "1+1=", "answer": "2", "level": 1}, {"prompt": "2*3=", "answer": "6", "level": 2}]


def write_all(tmp_path):
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS) + "\n")
    (tmp_path / "d.json").write_text(json.dumps(ROWS))
    (tmp_path / "wrapped.json").write_text(json.dumps({"version": 1, "data": ROWS}))
    (tmp_path / "d.csv").write_text("prompt,answer,level\n1+1=,2,1\n2*3=,6,2\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "d.parquet")
    import datasets

    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS),
                          "test": datasets.Dataset.from_list(ROWS[:1])}).save_to_disk(str(tmp_path / "hf"))
    return tmp_path


@pytest.mark.parametrize("name,fmt", [("d.jsonl", "jsonl"), ("d.json", "json"), ("wrapped.json", "json"),
                                      ("d.parquet", "parquet")])
def test_formats_read_the_same_records(tmp_path, name, fmt):
    write_all(tmp_path)
    assert [r for _, r in read_records(tmp_path / name, fmt)] == ROWS


def test_csv_reads_text_cells(tmp_path):
    write_all(tmp_path)
    got = [r for _, r in read_records(tmp_path / "d.csv", "csv")]
    assert got == [{k: str(v) for k, v in r.items()} for r in ROWS]


def test_hf_saved_dataset_splits(tmp_path):
    write_all(tmp_path)
    assert [r for _, r in read_records(tmp_path / "hf", "hf", split="train")] == ROWS
    assert [r for _, r in read_records(tmp_path / "hf", "hf", split="test")] == ROWS[:1]
    with pytest.raises(DataError, match="no split 'validation'; available splits: train, test"):
        list(read_records(tmp_path / "hf", "hf", split="validation"))


def test_hf_local_data_directory(tmp_path):
    data = tmp_path / "jsondir"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert [r["prompt"] for _, r in read_records(data, "hf", split="train")] == ["1+1=", "2*3="]


def test_where_names_file_and_line(tmp_path):
    write_all(tmp_path)
    wheres = [w for w, _ in read_records(tmp_path / "d.jsonl", "jsonl")]
    assert wheres == [f"{tmp_path / 'd.jsonl'}:1", f"{tmp_path / 'd.jsonl'}:2"]
    assert [w for w, _ in read_records(tmp_path / "d.csv", "csv")][1].endswith("d.csv:3")


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c",}\n{"prompt": "d"}\n')
    with pytest.raises(DataError, match=rf"{f}:3: not valid JSON"):
        list(read_records(f, "jsonl"))
    f.write_text('{"prompt": "a"}\n[1, 2]\n')
    with pytest.raises(DataError, match=rf"{f}:2: expected a JSON object per line, got list"):
        list(read_records(f, "jsonl"))


def test_other_bad_files(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        list(read_records(tmp_path / "missing.jsonl", "jsonl"))
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(DataError, match="is a directory, not a jsonl file"):
        list(read_records(tmp_path / "d.jsonl", "jsonl"))
    (tmp_path / "x.json").write_text('{"a": [1], "b": [2]}')
    with pytest.raises(DataError, match="exactly one list"):
        list(read_records(tmp_path / "x.json", "json"))
    (tmp_path / "y.json").write_text('[{"a": 1},\n {"a": 2,}]')
    with pytest.raises(DataError, match=r"y.json:2: not valid JSON"):
        list(read_records(tmp_path / "y.json", "json"))
    (tmp_path / "z.csv").write_text("a,b\n1,2\n1,2,3\n")
    with pytest.raises(DataError, match=r"z.csv:3: 3 cells but the header has 2 columns"):
        list(read_records(tmp_path / "z.csv", "csv"))
    (tmp_path / "p.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="cannot read as parquet"):
        list(read_records(tmp_path / "p.parquet", "parquet"))


def _configs_repo(root):
    """A dataset laid out as openai/gsm8k is on the hub: one folder per configuration, named in
    the README's `configs` metadata."""
    for config, offset in (("main", 0), ("socratic", 10)):
        (root / config).mkdir(parents=True)
        for split, n in (("train", 1), ("test", 2)):
            (root / config / f"{split}.jsonl").write_text(
                json.dumps({"question": f"{config} {split}", "answer": f"so #### {n + offset}"}) + "\n")
    (root / "README.md").write_text("---\nconfigs:\n" + "".join(
        f"- config_name: {c}\n  data_files:\n  - split: train\n    path: {c}/train.jsonl\n"
        f"  - split: test\n    path: {c}/test.jsonl\n" for c in ("main", "socratic")) + "---\n")
    return root


def test_hf_subset_picks_a_configuration(tmp_path):
    repo = _configs_repo(tmp_path / "gsm8k")
    got = [r for _, r in read_records(repo, "hf", split="test", subset="socratic")]
    assert got == [{"question": "socratic test", "answer": "so #### 12"}]
    with pytest.raises(DataError, match="several configurations; name one with data.hf_subset"):
        list(read_records(repo, "hf", split="test"))


def test_a_file_named_for_another_format_is_refused(tmp_path):
    # data.source=csv on a JSON-lines file would read its JSON text as the CSV header
    (tmp_path / "d.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n')
    with pytest.raises(DataError, match=r"d.jsonl is named like json or jsonl but data.source is csv; set "
                                         r"data.source=jsonl"):
        list(read_records(tmp_path / "d.jsonl", "csv"))
    # JSON lines named .json are common: the JSON family reads either name
    (tmp_path / "d.json").write_text('{"prompt": "1+1", "answer": "2"}\n')
    assert [r for _, r in read_records(tmp_path / "d.json", "jsonl")] == [{"prompt": "1+1", "answer": "2"}]

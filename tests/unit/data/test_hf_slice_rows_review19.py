"""Found by the 19th data review: a record read through a slice of an HF split (``train[100:200]``,
``train[50%:]``) is named by its row in the dataset, where the user will look for it, not by its
place in the slice."""

from __future__ import annotations

import json
import re

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_prompt_data, read_records

datasets = pytest.importorskip("datasets")

ROWS = {"prompt": [f"What is {i}+1?" for i in range(10)], "answer": [str(i + 1) for i in range(10)]}


@pytest.fixture(params=["saved", "data_dir"])
def bad_row_7(request, tmp_path):
    rows = {"prompt": [*ROWS["prompt"][:7], "  ", *ROWS["prompt"][8:]], "answer": ROWS["answer"]}
    if request.param == "saved":
        datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                              "test": datasets.Dataset.from_dict(ROWS)}).save_to_disk(tmp_path / "ds")
    else:  # a directory of data files, read by load_dataset
        (tmp_path / "ds").mkdir()
        (tmp_path / "ds" / "train.jsonl").write_text(
            "".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in zip(*rows.values(), strict=True)))
    return str(tmp_path / "ds")


@pytest.mark.parametrize("split", ["train[5:9]", "train[50%:]", "train[:1]+train[-3:]"])
def test_an_error_names_the_bad_rows_place_in_the_dataset_not_in_the_slice(bad_row_7, split):
    cfg = DataConfig(source="hf", train_path=bad_row_7, train_split=split, test_split=None)
    with pytest.raises(DataError, match=re.escape(f"ds[train] row 7 (in {split}): field 'prompt' holds an empty")):
        build_prompt_data(cfg, None, seed=0)


def test_every_row_of_a_slice_is_named_by_its_split_and_row(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS),
                          "test": datasets.Dataset.from_dict(ROWS)}).save_to_disk(tmp_path / "ds")
    where = [w.removeprefix(str(tmp_path / "ds")) for w, _ in
             read_records(tmp_path / "ds", "hf", split="train[:1]+test[80%:]")]
    assert where == ["[train] row 0 (in train[:1]+test[80%:])", "[test] row 8 (in train[:1]+test[80%:])",
                     "[test] row 9 (in train[:1]+test[80%:])"]
    assert [w.removeprefix(str(tmp_path / "ds")) for w, _ in read_records(tmp_path / "ds", "hf", split="test")][-1] \
        == "[test] row 9"


def test_a_slice_of_splits_of_unknown_length_says_its_rows_count_from_the_slice():
    from rlxf.data.readers import _dataset_row

    assert _dataset_row("train[100:200]", None, 100)(3) == \
        "[train[100:200]] row 3 of the slice (counted from the slice's first row, not the dataset's)"
    assert _dataset_row("train", None, 100)(3) == "[train] row 3"
    assert _dataset_row("train[100:200]", {"train": 500}, 100)(3) == "[train] row 103 (in train[100:200])"

"""Found by the 18th data review: a dataset saved with ``save_to_disk`` reads split slices
(``train[:90%]``) as ``load_dataset`` does, the usual way to hold out part of a one-split dataset."""

from __future__ import annotations

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_prompt_data, read_records

datasets = pytest.importorskip("datasets")

ROWS = {"prompt": [f"What is {i}+1?" for i in range(10)], "answer": [str(i + 1) for i in range(10)]}


@pytest.fixture(params=["dict", "single"])
def saved(request, tmp_path):
    ds = datasets.Dataset.from_dict(ROWS)
    (datasets.DatasetDict({"train": ds}) if request.param == "dict" else ds).save_to_disk(tmp_path / "ds")
    return tmp_path / "ds"


@pytest.mark.parametrize("split, want", [("train[:3]", [0, 1, 2]), ("train[80%:]", [8, 9]),
                                         ("train[:1]+train[-2:]", [0, 8, 9]), ("train", list(range(10)))])
def test_a_saved_dataset_reads_slices_of_its_splits(saved, split, want):
    assert [r["answer"] for _, r in read_records(saved, "hf", split=split)] == [str(i + 1) for i in want]


def test_a_held_out_slice_of_the_one_split_is_the_test_set(saved, tokenizer_for_tests):
    cfg = DataConfig(source="hf", train_path=str(saved), train_split="train[:80%]", test_split="train[80%:]")
    data = build_prompt_data(cfg, tokenizer_for_tests, seed=0)
    assert [p.ground_truth for p in data.train] == [str(i + 1) for i in range(8)]
    assert [p.ground_truth for p in data.test] == ["9", "10"]


def test_a_slice_it_cannot_read_names_the_split_and_the_ones_there_are(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS)}).save_to_disk(tmp_path / "ds")
    with pytest.raises(DataError, match=r"no split 'train\[:x\]' \(Unrecognized instruction format.*\); available "
                                        r"splits: train\. Set data.train_split"):
        list(read_records(tmp_path / "ds", "hf", split="train[:x]"))
    with pytest.raises(DataError, match=r"no split 'test\[:2\]' \(.*\); available splits: train"):
        list(read_records(tmp_path / "ds", "hf", split="test[:2]"))

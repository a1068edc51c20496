"""A hub dataset name with no network: said in seconds, from one request, instead of half a
minute of ``load_dataset``'s retries; the offline switches are put back after."""

from __future__ import annotations

import datasets
import pytest
from huggingface_hub import constants

import rlxf.models.loading as loading
from rlxf.data import DataError
from rlxf.data.readers import load_hf_split


def test_an_unreachable_hub_and_no_cached_copy_is_said_at_once(monkeypatch, tmp_path):
    monkeypatch.setattr(loading, "hub_unreachable", lambda: "ConnectError: [Errno -2] Name or service not known")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)
    real, offline_in_call = datasets.load_dataset, []

    def load_dataset(*args, **kwargs):   # what load_dataset saw: offline, so no request and no retry
        offline_in_call.append((datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE))
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with pytest.raises(DataError, match=r"cannot be reached from here \(ConnectError.*not in the local cache"):
        load_hf_split(datasets, "nobody/no-such-dataset-here", "train")
    assert offline_in_call == [(True, True)]
    assert constants.HF_HUB_OFFLINE is False and datasets.config.HF_HUB_OFFLINE is False

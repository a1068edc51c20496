"""Read records (plain dicts) from JSONL, JSON, parquet, CSV files or a Hugging Face dataset.

    for where, record in read_records("data/train.jsonl", "jsonl"):
        ...   # where = "data/train.jsonl:17", the place to name in an error

Every reader yields ``(where, record)`` so an error about a record can name its file and line
(JSONL, CSV) or its row (JSON, parquet, HF datasets).

Text files are read as UTF-8; a leading byte-order mark (what Excel writes for "CSV UTF-8") is
dropped (in JSONL at the start of any line: files concatenated with theirs), and bytes that are not UTF-8 raise a DataError naming the file, line and byte. A key
given twice in one JSON object, a CSV header that names a column twice, a CSV row with fewer
cells than the header, and a CSV quote never closed are errors too: read as they parse, one of
the two values (or a None, or the rest of the file as one cell) would be the data, silently.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlxf.data.errors import DataError

log = logging.getLogger("rlxf")

FORMATS = ("jsonl", "json", "parquet", "csv", "hf")
# the formats a file's name says it is in (a JSON-lines file is often named .json, so the JSON
# family is one group); a file named for another format than data.source is refused
_SUFFIX_FORMATS = {".jsonl": ("json", "jsonl"), ".ndjson": ("json", "jsonl"), ".json": ("jsonl", "json"),
                   ".csv": ("csv",), ".parquet": ("parquet",)}


def read_records(path: str | Path, fmt: str, split: str | None = None,
                 subset: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Records of ``path`` in format ``fmt`` (one of FORMATS); ``split`` and ``subset`` (the
    dataset's configuration name, e.g. ``main`` for ``openai/gsm8k``) only for ``hf``."""
    if fmt == "hf":
        yield from _read_hf(str(path), split or "train", subset)
        return
    if fmt not in FORMATS:
        raise DataError(f"unknown data format {fmt!r}; valid: {', '.join(FORMATS)}")
    p = Path(path).expanduser()
    if p.is_dir():
        raise DataError(f"data file {p} is a directory, not a {fmt} file (data.source={fmt}); give the file's "
                        f"path (a dataset saved with save_to_disk, or a directory of data files, is read with "
                        f"source: hf)")
    if not p.is_file():
        raise DataError(f"data file {p} does not exist (data.source={fmt}){unexpanded(str(path))}")
    named = _SUFFIX_FORMATS.get(p.suffix.lower())
    if named is not None and fmt not in named:
        raise DataError(f"data file {p} is named like {' or '.join(named)} but data.source is {fmt}; set "
                        f"data.source={named[-1]} (or rename the file if it really is {fmt})")
    reader = {"jsonl": _read_jsonl, "json": _read_json, "parquet": _read_parquet, "csv": _read_csv}[fmt]
    try:
        yield from reader(p)
    except UnicodeDecodeError as e:
        if fmt == "parquet":  # binary: not a text encoding problem
            raise
        raise _not_utf8(p, e) from None


def unexpanded(path: str) -> str:
    """What to do about a ``path`` that names environment variables (``$DATA/train.jsonl``), which
    are not expanded (a path is read as written, ``~`` aside); "" for any other."""
    if not _ENV_VAR.search(path):
        return ""
    expanded = os.path.expandvars(path)
    return (f"; environment variables in a path are not expanded: write it out"
            f"{f' ({expanded} here)' if expanded != path else ''}, or give it as a command-line override, "
            f"which the shell expands")


_ENV_VAR = re.compile(r"\$(\w+|\{\w+\})")


# "utf-8-sig" reads UTF-8 and drops a leading byte-order mark, which would otherwise stick to the
# first CSV column name ('\ufeffprompt') or make the first JSON line invalid
_ENCODING = "utf-8-sig"


# the first bytes of the compressed files datasets are shipped as (train.jsonl.gz), and how to unpack each
_COMPRESSED = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz",
               b"PK\x03\x04": "zip"}
_DECOMPRESS = {"gzip": "gunzip -k", "zstd": "zstd -d", "bzip2": "bunzip2 -k", "xz": "unxz -k", "zip": "unzip"}


def _not_utf8(p: Path, e: UnicodeDecodeError) -> DataError:
    """The error for a file that is not UTF-8 (or is compressed), at its first undecodable byte.
    A text-mode read reports the byte's offset within a buffer, not within the file, so the file
    is scanned again line by line to find the line and column."""
    where, byte = str(p), e.object[e.start]  # if the scan does not find it (the file changed)
    with p.open("rb") as f:
        start = f.read(6)
        compressed = next((kind for magic, kind in _COMPRESSED.items() if start.startswith(magic)), None)
        if compressed is not None:
            return DataError(f"{p} is a {compressed} archive, not text; decompress it first ({_DECOMPRESS[compressed]} "
                             f"{p.name}) and give the decompressed file's path")
        utf16 = start[:2] in (b"\xff\xfe", b"\xfe\xff")
        f.seek(0)
        for lineno, line in enumerate(f, start=1):
            try:
                line.decode(_ENCODING if lineno == 1 else "utf-8")
            except UnicodeDecodeError as bad:
                where, byte = f"{p}:{lineno}, column {bad.start + 1}", line[bad.start]
                break
    hint = " (it looks like UTF-16, Excel's \"Unicode Text\")" if utf16 else " (e.g. Latin-1 or Windows-1252)"
    return DataError(
        f"{where}: byte 0x{byte:02x} is not valid UTF-8; the file is in another encoding{hint}. "
        f"Save it as UTF-8 (in Excel: \"CSV UTF-8\"), or convert it, e.g. "
        f"iconv -f {'UTF-16' if utf16 else 'LATIN1'} -t UTF-8 {p.name} > utf8_{p.name}"
    )


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, or _DuplicateKey: ``json`` keeps the last of two equal keys."""
    record = dict(pairs)
    if len(record) < len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return record


def _duplicate(where: str, key: str) -> DataError:
    return DataError(f"{where}: key {key!r} appears twice in one JSON object, so which value is meant is "
                     f"unclear (a JSON reader keeps the last); remove or rename one of them")


def _read_jsonl(p: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with p.open(encoding=_ENCODING) as f:
        for lineno, line in enumerate(f, start=1):
            # a byte-order mark inside the file: files that each began with one, concatenated (an
            # empty one leaves a line of the mark alone)
            line = line.removeprefix("\ufeff")
            if not line.strip():
                continue  # blank lines (a trailing newline) are not records
            # a JSON list (one record per line or not) read as JSON lines: name the other format
            hint = "; the file looks like one JSON list, not JSON lines: set data.source=json" \
                if line.lstrip(" \t").startswith("[") else ""
            try:
                record = json.loads(line, object_pairs_hook=_unique_keys)
            except json.JSONDecodeError as e:
                raise DataError(f"{p}:{lineno}: not valid JSON ({e.msg} at column {e.colno}){hint}") from None
            except _DuplicateKey as e:
                raise _duplicate(f"{p}:{lineno}", e.key) from None
            if not isinstance(record, dict):
                raise DataError(f"{p}:{lineno}: expected a JSON object per line, got {type(record).__name__}{hint}")
            if _SURROGATE_ESCAPE.search(line):
                _check_surrogates(record, f"{p}:{lineno}")
            yield f"{p}:{lineno}", record


def _read_json(p: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    text = p.read_text(encoding=_ENCODING)
    surrogates = _SURROGATE_ESCAPE.search(text) is not None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        # a second value after the first: JSON lines (a .json name is common for them)
        hint = "; the file holds more than one JSON value: JSON lines? set data.source=jsonl" \
            if e.msg == "Extra data" else ""
        raise DataError(f"{p}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno}){hint}") from None
    except _DuplicateKey as e:
        raise _duplicate(str(p), e.key) from None
    if isinstance(data, dict):  # {"data": [...]} or {"train": [...]}: one list-valued key
        lists = [k for k, v in data.items() if isinstance(v, list)]
        if len(lists) != 1:
            raise DataError(
                f"{p}: expected a JSON list of records (or an object with exactly one list in it); "
                f"found keys {sorted(data)}"
            )
        data = data[lists[0]]
    if not isinstance(data, list):
        raise DataError(f"{p}: expected a JSON list of records, got {type(data).__name__}")
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise DataError(f"{p} record {i}: expected a JSON object, got {type(record).__name__}")
        if surrogates:
            _check_surrogates(record, f"{p} record {i}")
        yield f"{p} record {i}", record


# a JSON escape of half a UTF-16 surrogate pair: an emoji written by an ASCII-only writer (two of
# them, decoded as one character), or half of one left by cutting the text between them
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_surrogates(value: Any, where: str, field: str = "") -> None:
    """A DataError naming the field of ``value`` (a record) that holds a lone surrogate: JSON
    decodes a ``\\ud83d`` without its other half to a character UTF-8 cannot encode, which no
    tokenizer takes (a TypeError, far from the record, once the batch is encoded)."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_surrogates(v, where, f"{field}.{k}" if field else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_surrogates(v, where, f"{field}[{i}]")
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise DataError(f"{where}: field {field!r} holds \\u{ord(value[e.start]):04x} at character {e.start}, half of "
                            f"a character written as a UTF-16 surrogate pair (an emoji, say) whose other half is "
                            f"missing, which no tokenizer can encode: the text was cut between the two. Remove the "
                            f"escape (or write the whole character), or drop the record") from None


def _read_csv(p: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    # strict: a quote never closed would otherwise swallow every later line into one cell, and
    # text after a closing quote ("ab"c) would lose its quotes, both silently; the field size
    # limit (128 KiB) guards against just that runaway cell, so a long prompt is read in full
    limit = csv.field_size_limit(_CSV_FIELD_LIMIT)
    try:
        with p.open(encoding=_ENCODING, newline="") as f:
            reader = csv.reader(f, strict=True)
            rows = _csv_rows(p, reader)
            header = next(rows, (1, None))[1]
            if header is None:
                return
            twice = sorted({c for c in header if header.count(c) > 1})
            if twice:
                raise DataError(f"{p}:1: the header names column(s) {twice} more than once, so a row's cell for "
                                f"them is ambiguous (the last one would win); rename the repeated columns")
            for start, row in rows:
                if not row:
                    continue  # blank lines are not records
                if len(row) != len(header):  # a missing cell would read as None, an extra one is lost
                    raise DataError(f"{p}:{start}: {len(row)} cells but the header has {len(header)} "
                                    f"columns; fix the row (quote a cell that holds a comma)")
                yield f"{p}:{start}", dict(zip(header, row))
    finally:
        csv.field_size_limit(limit)


_CSV_FIELD_LIMIT = 2**31 - 1  # the largest the C reader takes on every platform


def _csv_rows(p: Path, reader) -> Iterator[tuple[int, list[str]]]:
    """(the line a record starts on, its cells): ``line_num`` is where it ends, since a quoted
    cell may hold line breaks. A CSV syntax error names the line of the record it is in."""
    end = 0
    while True:
        start = end + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            hint = ("a quoted cell opened on this line is never closed: close its quote, or double a quote "
                    "inside a quoted cell (\"\")" if "end of data" in str(e) else
                    "text follows a closing quote: quote the whole cell, and double a quote inside it (\"\")")
            raise DataError(f"{p}:{start}: not valid CSV ({e}); {hint}") from None
        end = reader.line_num
        yield start, row


def _read_parquet(p: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError("reading parquet needs pyarrow: pip install 'rlxf[datasets]'") from None
    try:
        table = pq.read_table(p)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DataError(f"{p}: cannot read as parquet ({type(e).__name__}: {e})") from None
    for i, record in enumerate(table.to_pylist()):
        yield f"{p} row {i}", record


def _read_hf(name: str, split: str, subset: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        import datasets
    except ImportError:
        raise DataError("data.source=hf needs the datasets package: pip install 'rlxf[datasets]'") from None
    ds, lengths = _load_hf_split(datasets, name, split, subset)
    row = _dataset_row(split, lengths, len(ds))
    for i, record in enumerate(ds):
        yield f"{name}{row(i)}", dict(record)


def _dataset_row(split: str, lengths: dict[str, int] | None, n: int) -> Callable[[int], str]:
    """Where row ``i`` of ``split`` is in the dataset, ``[train] row 107 (in train[100:200])``: a
    slice's own row numbers would send a user to the wrong row. ``lengths``: the number of rows
    of each of the dataset's splits (None: unknown, as for a hub dataset without split info);
    ``n``: the rows read, which the slice's parts must add up to."""
    from datasets.arrow_reader import ReadInstruction

    if split in (lengths or {}) or not any(c in split for c in "[+"):
        return lambda i: f"[{split}] row {i}"
    try:
        parts = ReadInstruction.from_spec(split).to_absolute(lengths or {})
    except (ValueError, AssertionError, KeyError):
        parts = []
    if sum(p.to - p.from_ for p in parts) != n:
        return lambda i: f"[{split}] row {i} of the slice (counted from the slice's first row, not the dataset's)"

    def row(i: int) -> str:
        for part in parts:
            if i < part.to - part.from_:
                return f"[{part.splitname}] row {part.from_ + i} (in {split})"
            i -= part.to - part.from_
        raise IndexError(i)  # unreachable: the parts add up to n
    return row


_SPLIT_FIX = ("Set data.train_split / data.test_split to one of them (data.test_split: null for no held-out split), "
              "or hold out a slice of one: data.train_split: train[:90%], data.test_split: train[90%:]")


def _slice_split(datasets, splits: dict[str, Any], name: str, split: str):
    """``split`` as ``load_dataset`` reads it (``train[:90%]``, ``train[:100]+test[:10]``), of the
    splits of a dataset saved with ``save_to_disk``: the usual way to hold out part of a
    one-split dataset reads the same from the hub and from disk."""
    from datasets.arrow_reader import ReadInstruction

    try:
        parts = ReadInstruction.from_spec(split).to_absolute({k: len(v) for k, v in splits.items()})
    except (ValueError, AssertionError) as e:
        detail = f" ({str(e).rstrip('.')})" if "[" in split or "+" in split else ""
        raise DataError(f"{name}: no split {split!r}{detail}; available splits: {', '.join(splits)}. {_SPLIT_FIX}") \
            from None
    pieces = [splits[p.splitname].select(range(p.from_, p.to)) for p in parts]
    return pieces[0] if len(pieces) == 1 else datasets.concatenate_datasets(pieces)


def _load_from_hub(datasets, name: str, subset: str | None, split: str):
    """``load_dataset(name)`` from the hub, or, when the hub cannot be reached from here, from the
    local cache alone: asked without a network, ``load_dataset`` spends half a minute in retries
    before it fails. One request says whether the hub answers (``hub_unreachable``)."""
    from huggingface_hub import constants

    from rlxf.models.loading import hub_unreachable

    if constants.HF_HUB_OFFLINE or (unreachable := hub_unreachable()) is None:
        return datasets.load_dataset(name, subset, split=split)
    offline = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True   # the cache only, no retries
    try:
        loaded = datasets.load_dataset(name, subset, split=split)
    except (FileNotFoundError, ConnectionError) as e:
        raise DataError(
            f"cannot load dataset {name!r}: the Hugging Face hub ({constants.ENDPOINT}) cannot be reached from here "
            f"({unreachable}) and the dataset is not in the local cache ({datasets.config.HF_DATASETS_CACHE}) "
            f"({type(e).__name__}). Download it where the hub is reachable and copy the cache here, or give a "
            f"local directory (save_to_disk output or data files).") from None
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = offline
    log.warning("the Hugging Face hub (%s) cannot be reached (%s): dataset %s is read from the local cache",
                constants.ENDPOINT, unreachable, name)
    return loaded


def load_hf_split(datasets, name: str, split: str, subset: str | None = None):
    """One split of a dataset saved with ``save_to_disk``, a local data directory, or a hub name
    (``subset``: the configuration of a hub dataset that has several; not for ``save_to_disk``)."""
    return _load_hf_split(datasets, name, split, subset)[0]


def _load_hf_split(datasets, name: str, split: str, subset: str | None = None):
    """(``load_hf_split``, the number of rows of each of the dataset's splits, or None if unknown)."""
    local = Path(name).expanduser()
    if local.is_dir() and ((local / "dataset_dict.json").is_file() or (local / "dataset_info.json").is_file()
                           and (local / "state.json").is_file()):
        loaded = datasets.load_from_disk(str(local))
        splits = dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
        lengths = {k: len(v) for k, v in splits.items()}
        if split in splits:
            return splits[split], lengths
        try:
            return _slice_split(datasets, splits, name, split), lengths
        except DataError:
            if isinstance(loaded, datasets.DatasetDict):
                raise
            raise DataError(f"{name} is a single dataset (no splits), read as split 'train' or a slice of it "
                            f"(not {split!r}). {_SPLIT_FIX}") from None
    try:
        ds = datasets.load_dataset(str(local), subset, split=split) if local.is_dir() else \
            _load_from_hub(datasets, name, subset, split)
        return ds, {k: v.num_examples for k, v in (ds.info.splits or {}).items()}
    except ValueError as e:
        if "config name is missing" in str(e).lower():
            raise DataError(f"{name} has several configurations; name one with data.hf_subset ({e})") from None
        if "split" in str(e).lower() or "instruction" in str(e).lower():   # a split name or slice it cannot read
            raise DataError(f"{name}: no split {split!r} ({str(e).rstrip('.')}). {_SPLIT_FIX}") from None
        raise DataError(f"cannot load dataset {name!r}: {e}") from None
    except (FileNotFoundError, ConnectionError, OSError) as e:
        raise DataError(
            f"cannot load dataset {name!r}: {type(e).__name__}: {e}. Give a local directory "
            f"(save_to_disk output or data files) or a reachable hub name."
        ) from None

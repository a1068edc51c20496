"""Shared plumbing of the prompt, SFT and preference builders: which records, and length limits."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

from rlxf.config.data import DataConfig
from rlxf.data.errors import DataError
from rlxf.data.readers import read_records

log = logging.getLogger("rlxf.data")

Record = tuple[str, dict[str, Any]]  # (where, record)


def source_name(path: str) -> str:
    """Short name for uids: a file's stem, or a dataset directory's / hub name's last part."""
    p = Path(path)
    return (p.stem if p.suffix else p.name) or path


def split_records(cfg: DataConfig, split: str) -> tuple[str, list[Record]] | None:
    """(source name, records) of the ``train`` or ``test`` split of a file/HF source; None = no test."""
    if split == "train":
        path, hf_split = cfg.train_path, cfg.train_split
    elif cfg.source == "hf":
        if cfg.test_split is None:
            return None
        path, hf_split = cfg.test_path or cfg.train_path, cfg.test_split
    else:
        if cfg.test_path is None:
            return None
        path, hf_split = cfg.test_path, None
    assert path is not None  # DataConfig requires train_path for file sources
    return source_name(path), list(read_records(path, cfg.source, split=hf_split, subset=cfg.hf_subset))


def fit_length(ids: list[int], max_len: int | None, policy: str, where: str, what: str,
               keep: str, counts: Counter) -> list[int] | None:
    """``ids`` within ``max_len`` per ``policy``: unchanged, truncated, None (dropped), or an error.

    ``keep`` is ``last`` for prompts (the generation prompt is at the end) and ``first`` for
    responses. ``counts[f"{what}_truncated"]`` / ``counts[f"{what}_dropped_overlong"]`` count it.
    """
    if max_len is None or len(ids) <= max_len:
        return ids
    if policy == "error":
        raise DataError(
            f"{where}: {what} has {len(ids)} tokens, over the limit of {max_len} (data.overlong_prompt=error); "
            f"raise the limit, or set data.overlong_prompt to drop or truncate"
        )
    if policy == "truncate":
        counts[f"{what}_truncated"] += 1
        return ids[-max_len:] if keep == "last" else ids[:max_len]
    counts[f"{what}_dropped_overlong"] += 1
    return None


def drop_held_out(train: list, keys: dict[str, str], held_out: set[str]) -> tuple[list, int]:
    """``train`` (items with a ``uid``) without those whose prompt's content key (``keys[uid]``,
    ``prompts.content_key``) is in ``held_out``, and how many were dropped: a held-out prompt
    is never trained on, in any recipe, whatever the generators' seeds or templates did."""
    kept = [e for e in train if keys[e.uid] not in held_out]
    return kept, len(train) - len(kept)


def require_some(n_kept: int, split: str, counts: Counter, cfg: DataConfig) -> None:
    """A clear error, before any training, when filtering left nothing."""
    if n_kept:
        return
    if split in ("train", "test") and counts.get(f"{split}_read") == 0 and cfg.source != "task":
        # nothing to filter: the length limits are not the problem, the input is
        path = cfg.train_path if split == "train" else (cfg.test_path or cfg.train_path)
        hf = f" and data.{split}_split" if cfg.source == "hf" else ""
        raise DataError(f"{path or 'the data'} holds no {split} records ({split}_read=0: the file is empty, or "
                        f"has only blank lines); check data.{split}_path{hf}")
    detail = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()) if k.startswith(split)) or "nothing read"
    held_out = counts.get(f"{split}_removed_in_test", 0) + counts.get(f"{split}_removed_held_out", 0)
    if held_out:
        raise DataError(
            f"no {split} examples left ({detail}): {held_out} were removed because their prompts are held-out "
            f"prompts (data.test_path, or another source's held-out split), which are never trained on. Give a "
            f"test file whose prompts are not in the training data (it may not be the training file itself)"
        )
    raise DataError(
        f"no {split} examples left after filtering ({detail}). Check data.train_path / data.task, or raise "
        f"data.max_prompt_len (now {cfg.max_prompt_len}) / data.max_response_len, or set "
        f"data.overlong_prompt=truncate"
    )


def require_evaluated(name: str, n_test: int, counts: Counter) -> None:
    """A source of weight 0 is only evaluated: it needs no training prompts (its held-out file may
    be its training file too), but without held-out ones it would do nothing at all."""
    if n_test:
        return
    detail = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()) if k.startswith("test")) or "no test split"
    raise DataError(f"data.sources[{name}] has weight 0 (evaluated only) but no held-out prompts ({detail}), so it "
                    f"is neither trained on nor evaluated; give it a test_path (or test_split / test_size), or "
                    f"a weight > 0")


def log_report(kind: str, report: dict[str, int]) -> None:
    log.info("%s data: %s", kind, ", ".join(f"{k}={v}" for k, v in report.items()))
    skipped = {k: v for k, v in report.items() if v and ("dropped" in k or "removed" in k or "truncated" in k)}
    repeated = {k: v for k, v in report.items() if v and k.endswith("test_repeated")}
    if repeated:  # kept: a held-out prompt written twice counts twice in every accuracy
        log.warning("%s data: %s: held-out prompts that repeat an earlier one (same text), each counted again in "
                    "the accuracy; deduplicate the test file, or lower test_size for a task with few distinct "
                    "problems", kind, ", ".join(f"{k}={v}" for k, v in repeated.items()))
    if skipped:
        log.warning("%s data: %s", kind, ", ".join(f"{k}={v}" for k, v in skipped.items()))

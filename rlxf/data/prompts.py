"""RL prompts from a procedural task or a dataset, templated and tokenized once.

    data = build_prompt_data(cfg.data, tokenizer, seed=cfg.seeds.data)
    data.train, data.test      # lists of rlxf.types.Prompt
    data.report                # counts: read, dropped as too long, truncated, removed as test overlap

Each Prompt carries what its verifier needs: ``ground_truth`` (the answer; for reasoning-gym
the whole entry, scored by the dataset's own ``score_answer``) and ``metadata`` (for tasks:
``task`` and ``task_options``, plus the task's own fields; for files: the record's other keys).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlxf.config.data import DataConfig
from rlxf.data.errors import DataError
from rlxf.data.sources import Record, fit_length, log_report, require_some, split_records
from rlxf.data.tasks import check_disjoint, get_task
from rlxf.data.templates import check_messages, encode_prompts, get_field
from rlxf.types import Prompt


@dataclass
class PromptData:
    train: list[Prompt]
    test: list[Prompt]
    report: dict[str, int] = field(default_factory=dict)


def _finish(raw: list[tuple[str, str, list[int], str, Any, dict[str, Any]]], split: str, cfg: DataConfig,
            tokenizer, counts: Counter) -> list[Prompt]:
    """Apply the length policy to (where, uid, ids, text, ground truth, metadata) rows."""
    out = []
    for where, uid, ids, text, gt, meta in raw:
        kept = fit_length(ids, cfg.max_prompt_len, cfg.overlong_prompt, where, f"{split}_prompt", "last", counts)
        if kept is None:
            continue
        if kept is not ids:
            text = tokenizer.decode(kept)
        out.append(Prompt(uid=uid, prompt_ids=kept, prompt_text=text, ground_truth=gt, metadata=meta))
    return out


def _task_prompts(cfg: DataConfig, tokenizer, seed: int, counts: Counter) -> tuple[list[Prompt], list[Prompt]]:
    assert cfg.task is not None
    task = get_task(cfg.task, cfg.task_options)
    train_items, test_items = task.splits(cfg.train_size, cfg.test_size, seed)
    check_disjoint(train_items, test_items, task.name)
    splits = []
    for split, items in (("train", train_items), ("test", test_items)):
        counts[f"{split}_read"] = len(items)
        encoded = encode_prompts(tokenizer, [it.question for it in items], system_prompt=cfg.system_prompt,
                                 use_chat_template=cfg.apply_chat_template)
        raw = [(f"task {task.name} {split} item {i}", f"{task.name}:{split}:{i}", ids, text,
                it.ground_truth if it.ground_truth is not None else it.answer,
                {"task": task.name, "task_options": task.options, "question": it.question, "answer": it.answer,
                 **it.metadata})
               for i, (it, (ids, text)) in enumerate(zip(items, encoded, strict=True))]
        splits.append(_finish(raw, split, cfg, tokenizer, counts))
    return splits[0], splits[1]


def record_prompt(record: dict[str, Any], where: str, cfg: DataConfig) -> tuple[str | list, Any, dict[str, Any]]:
    """(prompt text or messages, ground truth, metadata) of one record, per ``cfg.fields``."""
    f = cfg.fields
    if f.messages is not None:
        prompt: str | list = check_messages(get_field(record, f.messages, where, "messages"), where, f.messages)
    else:
        assert f.prompt is not None
        prompt = get_field(record, f.prompt, where, "prompt")
        if not isinstance(prompt, str):
            raise DataError(f"{where}: field {f.prompt!r} (data.fields.prompt) must be text, got "
                            f"{type(prompt).__name__}; for chat messages set data.fields.messages={f.prompt}")
    gt = get_field(record, f.ground_truth, where, "ground_truth") if f.ground_truth is not None else None
    if f.metadata is not None:
        meta = {k: get_field(record, k, where, "metadata") for k in f.metadata}
    else:
        mapped = {f.messages if f.messages is not None else f.prompt, f.ground_truth}
        meta = {k: v for k, v in record.items() if k not in mapped}
    return prompt, gt, meta


def _file_prompts(cfg: DataConfig, tokenizer, counts: Counter) -> tuple[list[Prompt], list[Prompt]]:
    splits: list[list[Prompt]] = []
    for split in ("train", "test"):
        found = split_records(cfg, split)
        if found is None:
            splits.append([])
            continue
        name, records = found
        counts[f"{split}_read"] = len(records)
        parsed = [record_prompt(rec, where, cfg) for where, rec in records]
        encoded = encode_prompts(tokenizer, [p for p, _, _ in parsed], system_prompt=cfg.system_prompt,
                                 use_chat_template=cfg.apply_chat_template)
        raw = [(where, f"{name}:{split}:{i}", ids, text, gt, meta)
               for i, ((where, _), (_, gt, meta), (ids, text)) in enumerate(zip(records, parsed, encoded, strict=True))]
        splits.append(_finish(raw, split, cfg, tokenizer, counts))
    train, test = splits
    held_out = {tuple(p.prompt_ids) for p in test}
    if held_out:
        before = len(train)
        train = [p for p in train if tuple(p.prompt_ids) not in held_out]
        counts["train_removed_in_test"] = before - len(train)
    return train, test


def build_prompt_data(cfg: DataConfig, tokenizer, seed: int) -> PromptData:
    """Train and test prompts per ``cfg``; raises DataError before any training if none are left.

    Nothing is skipped silently: every drop, truncation and overlap removal is counted in
    ``report`` (and logged).
    """
    counts: Counter = Counter()
    if cfg.source == "task":
        train, test = _task_prompts(cfg, tokenizer, seed, counts)
    else:
        train, test = _file_prompts(cfg, tokenizer, counts)
    require_some(len(train), "train", counts, cfg)
    report = dict(sorted(counts.items()))
    report["train"], report["test"] = len(train), len(test)
    report["max_prompt_tokens"] = max((len(p.prompt_ids) for p in (*train, *test)), default=0)
    log_report("prompt", report)
    return PromptData(train, test, report)


def read_task_records(cfg: DataConfig, seed: int) -> dict[str, list[Record]]:
    """Task items as (where, record) pairs with ``prompt`` / ``response`` keys (for SFT)."""
    assert cfg.task is not None
    task = get_task(cfg.task, cfg.task_options)
    train, test = task.splits(cfg.train_size, cfg.test_size, seed)
    check_disjoint(train, test, task.name)
    return {split: [(f"task {task.name} {split} item {i}", {"prompt": it.question, "response": it.answer})
                    for i, it in enumerate(items)]
            for split, items in (("train", train), ("test", test))}

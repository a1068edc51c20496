"""RL prompts from a procedural task or a dataset, templated and tokenized once.

    data = build_prompt_data(cfg.data, tokenizer, seed=cfg.seeds.data)
    data.train, data.test      # lists of rlxf.types.Prompt
    data.report                # counts: read, dropped as too long, truncated, removed as test overlap

A mixture (``data.sources``) builds every source the same way, names each prompt's uid after
its source (``<name>:<split>:<i>``) and gives ``weights`` per source for the sampler. Held-out
prompts are kept out of training by content, across every source of the run: any training
prompt whose normalised text (``content_key``) is some source's held-out prompt is removed and
counted (``train_removed_held_out``), whatever the generators' seeds did.

Each Prompt carries what its verifier needs: ``ground_truth`` (the answer; for reasoning-gym
the whole entry, scored by the dataset's own ``score_answer``) and ``metadata`` (for tasks:
``task`` and ``task_options``, plus the task's own fields; for files: the record's other keys).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlxf.config.data import DataConfig, SourceFields
from rlxf.data.errors import DataError
from rlxf.data.sources import (
    Record,
    drop_held_out,
    fit_length,
    log_report,
    require_evaluated,
    require_some,
    split_records,
)
from rlxf.data.tasks import check_disjoint, get_task
from rlxf.data.templates import (
    SYSTEM_ROLES,
    check_messages,
    check_not_blank,
    check_prompt,
    content_text,
    encode_prompts,
    get_field,
)
from rlxf.types import Prompt

log = logging.getLogger("rlxf.data")


@dataclass
class PromptData:
    train: list[Prompt]
    test: list[Prompt]
    report: dict[str, int] = field(default_factory=dict)
    weights: dict[str, float] | None = None   # a mixture: source name -> sampling weight (None: one source)
    held_out: frozenset[str] = frozenset()    # content_key of every held-out prompt (kept out of PPO-ptx too)


@dataclass
class SourcePrompts:
    """One source's prompts, with each prompt's ``content_key`` by uid (for held-out removal)."""

    train: list[Prompt]
    test: list[Prompt]
    keys: dict[str, str]


def content_key(prompt: str | list[dict[str, Any]]) -> str:
    """A hash of a prompt's text as written (before any template), with differences of
    presentation only folded (``normalise_text``): two sources that render the same question
    with a different system prompt, spacing, Unicode composition or seed still share a key.

    Chat messages hash their roles and contents, without system (and developer) turns (a system
    prompt is templating, as ``data.system_prompt`` is); a conversation of one user turn is keyed
    as that turn's text, since a text prompt becomes exactly that turn, and content given as parts
    (``[{"type": "text", "text": ...}]``) as the text the template renders of them
    (``content_text``). So the same question held out by one source as text and given by another
    as ``messages`` is still kept out of training."""
    if not isinstance(prompt, str):
        turns = [{**m, "content": content_text(m.get("content"), "prompt", f"messages[{i}]")}
                 for i, m in enumerate(prompt) if m.get("role") not in SYSTEM_ROLES]
        if len(turns) == 1 and turns[0].get("role") == "user":
            prompt = turns[0]["content"]
        else:
            prompt = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in turns)
    return hashlib.sha256(normalise_text(prompt).encode()).hexdigest()[:32]


# compatibility mappings that change how a character looks, not what it says: full- and
# half-width forms, no-break spaces, ligatures (fi), Arabic contextual forms, vertical and small
# variants, squared units. Superscripts and subscripts (x² is not x2), fractions (1½ is not 11/2),
# math fonts (ℝ is not R) and circled numbers are kept: NFKC would merge them, and drop training
# prompts that differ in meaning as if they were held-out ones
_PRESENTATION = frozenset({"<wide>", "<narrow>", "<noBreak>", "<compat>", "<initial>", "<medial>", "<final>",
                           "<isolated>", "<vertical>", "<small>", "<square>"})


def normalise_text(text: str) -> str:
    """``text`` as a reader sees it: canonical composition (NFC: é as one code point or as e
    and an accent), presentation forms folded (``_PRESENTATION``), invisible format characters
    (zero-width space, soft hyphen, byte-order mark, variation selectors) dropped and whitespace
    runs collapsed. Case is kept: ``X`` and ``x`` are different variables."""
    if not text.isascii():  # ASCII has nothing to compose, fold or drop
        text = unicodedata.normalize("NFC", "".join(map(_fold, unicodedata.normalize("NFD", text))))
    return " ".join(text.split())


@functools.lru_cache(maxsize=4096)
def _fold(ch: str) -> str:
    """One character with its presentation mappings applied, recursively (so ㎡ is m², not m2)."""
    if unicodedata.category(ch) == "Cf" or "\ufe00" <= ch <= "\ufe0f" or "\U000e0100" <= ch <= "\U000e01ef":
        return ""
    tag, _, rest = unicodedata.decomposition(ch).rpartition(">")
    if not rest or (tag and f"{tag}>" not in _PRESENTATION):
        return ch
    return "".join(_fold(chr(int(code, 16))) for code in rest.split())


def _finish(raw: list[tuple[str, str, list[int], str, Any, dict[str, Any], str]], split: str, cfg: DataConfig,
            tokenizer, counts: Counter) -> list[Prompt]:
    """Apply the length policy to (where, uid, ids, text, ground truth, metadata, question) rows."""
    out = []
    for where, uid, ids, text, gt, meta, question in raw:
        kept = fit_length(ids, cfg.max_prompt_len, cfg.overlong_prompt, where, f"{split}_prompt", "last", counts)
        if kept is None:
            continue
        if kept is not ids:
            text = tokenizer.decode(kept)
        out.append(Prompt(uid=uid, prompt_ids=kept, prompt_text=text, ground_truth=gt, metadata=meta,
                          question=question))
    return out


def _task_prompts(cfg: DataConfig, tokenizer, seed: int, counts: Counter, name: str | None) -> SourcePrompts:
    assert cfg.task is not None
    task = get_task(cfg.task, cfg.task_options)
    train_items, test_items = task.splits(cfg.train_size, cfg.test_size, seed)
    check_disjoint(train_items, test_items, task.name)
    splits, keys = [], {}
    for split, items in (("train", train_items), ("test", test_items)):
        counts[f"{split}_read"] = len(items)
        encoded = encode_prompts(tokenizer, [it.question for it in items], system_prompt=cfg.system_prompt,
                                 use_chat_template=cfg.apply_chat_template,
                                 wheres=[f"task {task.name} {split} item {i}" for i in range(len(items))])
        uids = [f"{name or task.name}:{split}:{i}" for i in range(len(items))]
        keys.update((uid, content_key(it.question)) for uid, it in zip(uids, items, strict=True))
        raw = [(f"task {task.name} {split} item {i}", uid, ids, text,
                it.ground_truth if it.ground_truth is not None else it.answer,
                {"task": task.name, "task_options": task.options, "question": it.question, "answer": it.answer,
                 **it.metadata}, it.question)
               for i, (uid, it, (ids, text)) in enumerate(zip(uids, items, encoded, strict=True))]
        splits.append(_finish(raw, split, cfg, tokenizer, counts))
    return SourcePrompts(splits[0], splits[1], keys)


def record_prompt(record: dict[str, Any], where: str, cfg: DataConfig) -> tuple[str | list, Any, dict[str, Any]]:
    """(prompt text or messages, ground truth, metadata) of one record, per ``cfg.fields``."""
    f = cfg.fields
    if f.messages is not None:
        prompt: str | list = check_messages(get_field(record, f.messages, where, "messages"), where, f.messages)
        check_not_blank(prompt, where, f.messages)
    else:
        assert f.prompt is not None
        # text or messages, record by record (as SFT and preference data read it): a file that
        # mixes the two could otherwise be read by neither data.fields.prompt nor .messages
        prompt = check_prompt(get_field(record, f.prompt, where, "prompt"), where, f.prompt, "prompt")
    gt = get_field(record, f.ground_truth, where, "ground_truth") if f.ground_truth is not None else None
    if isinstance(gt, float) and math.isnan(gt):
        raise DataError(f"{where}: field {f.ground_truth!r} (data.fields.ground_truth) is NaN: a missing value "
                        f"(pandas writes one for an empty cell), not an answer: the verifiers would score every "
                        f"response 0, or reward one that says 'nan'; fill in the answer, or drop the record")
    if f.metadata is not None:
        meta = {k: get_field(record, k, where, "metadata") for k in f.metadata}
    else:
        mapped = {f.messages if f.messages is not None else f.prompt, f.ground_truth}
        meta = {k: v for k, v in record.items() if k not in mapped}
    return prompt, gt, meta


def _file_prompts(cfg: DataConfig, tokenizer, counts: Counter, name: str | None) -> SourcePrompts:
    splits: list[list[Prompt]] = []
    keys: dict[str, str] = {}
    for split in ("train", "test"):
        found = split_records(cfg, split)
        if found is None:
            splits.append([])
            continue
        file_name, records = found
        counts[f"{split}_read"] = len(records)
        parsed = [record_prompt(rec, where, cfg) for where, rec in records]
        encoded = encode_prompts(tokenizer, [p for p, _, _ in parsed], system_prompt=cfg.system_prompt,
                                 use_chat_template=cfg.apply_chat_template, wheres=[w for w, _ in records])
        uids = [f"{name or file_name}:{split}:{i}" for i in range(len(records))]
        keys.update((uid, content_key(p)) for uid, (p, _, _) in zip(uids, parsed, strict=True))
        raw = [(where, uid, ids, text, gt, meta, _question(p, where))
               for uid, (where, _), (p, gt, meta), (ids, text) in zip(uids, records, parsed, encoded, strict=True)]
        splits.append(_finish(raw, split, cfg, tokenizer, counts))
    return SourcePrompts(splits[0], splits[1], keys)


def _question(prompt: str | list, where: str) -> str:
    """A file prompt's ``Prompt.question``: its text, or the text of its last user message (what an
    environment is given, ``rlxf.envs.agent.episode_task``)."""
    if isinstance(prompt, str):
        return prompt
    user = [m for m in prompt if m.get("role") == "user"] or prompt
    return content_text(user[-1].get("content"), where, "content") or ""


def _source_prompts(cfg: DataConfig, tokenizer, seed: int, counts: Counter, name: str | None = None) -> SourcePrompts:
    if cfg.source == "task":
        return _task_prompts(cfg, tokenizer, seed, counts, name)
    return _file_prompts(cfg, tokenizer, counts, name)


def source_config(cfg: DataConfig, source: SourceFields) -> DataConfig:
    """``cfg`` (its templating and length limits) with one source's fields in place of its own."""
    return cfg.model_copy(update={k: getattr(source, k) for k in SourceFields.model_fields} | {"sources": []})


def warn_ignored_fields(cfg: DataConfig) -> None:
    """``DataConfig.ignored_source_fields``, logged as a warning."""
    if (note := cfg.ignored_source_fields()) is not None:
        log.warning("%s", note)


def source_seed(source: SourceFields, seed: int) -> int:
    """The generator seed of a mixture source or the ptx data: its own ``seed``, else the run's."""
    own = getattr(source, "seed", None)
    return seed if own is None else own


def build_prompt_data(cfg: DataConfig, tokenizer, seed: int) -> PromptData:
    """Train and test prompts per ``cfg`` (one source, or the mixture ``cfg.sources``); raises
    DataError before any training if a source has none left.

    Nothing is skipped silently: every drop, truncation and overlap removal is counted in
    ``report`` (per source in a mixture: ``<name>/train``, ...) and logged.
    """
    counts: Counter = Counter()
    if not cfg.mixture:
        built = {None: _source_prompts(cfg, tokenizer, seed, counts)}
        source_counts = {None: counts}
    else:
        warn_ignored_fields(cfg)
        source_counts = {s.label: Counter() for s in cfg.sources}
        built = {s.label: _source_prompts(source_config(cfg, s), tokenizer, source_seed(s, seed),
                                          source_counts[s.label], s.label)
                 for s in cfg.sources}
    held_out = {parts.keys[p.uid] for parts in built.values() for p in parts.test}
    weights = {s.label: s.weight for s in cfg.sources} if cfg.mixture else None
    for name, parts in built.items():
        parts.train, removed = drop_held_out(parts.train, parts.keys, held_out)
        if removed:
            # one source keeps the name its report always had
            source_counts[name]["train_removed_in_test" if name is None else "train_removed_held_out"] = removed
        if weights is not None and weights[name] == 0:
            require_evaluated(name, len(parts.test), source_counts[name])
        else:
            require_some(len(parts.train), "train", source_counts[name], cfg)
    report: dict[str, int] = {}
    for name, parts in built.items():
        prefix = "" if name is None else f"{name}/"
        source_counts[name].update(train=len(parts.train), test=len(parts.test))
        # repeats are kept (a repeated prompt is drawn, or scored, that much more often) and counted
        for split, prompts in (("train", parts.train), ("test", parts.test)):
            if repeats := len(prompts) - len({parts.keys[p.uid] for p in prompts}):
                source_counts[name][f"{split}_repeated"] = repeats
        report |= {f"{prefix}{k}": v for k, v in sorted(source_counts[name].items())}
    train = [p for parts in built.values() for p in parts.train]
    test = [p for parts in built.values() for p in parts.test]
    if cfg.mixture:
        report["train"], report["test"] = len(train), len(test)
        report["train_removed_held_out"] = sum(c["train_removed_held_out"] for c in source_counts.values())
    report["max_prompt_tokens"] = max((len(p.prompt_ids) for p in (*train, *test)), default=0)
    log_report("prompt", report)
    return PromptData(train, test, report, weights, frozenset(held_out))


def read_task_records(cfg: DataConfig, seed: int) -> dict[str, list[Record]]:
    """Task items as (where, record) pairs with ``prompt`` / ``response`` keys (for SFT)."""
    assert cfg.task is not None
    task = get_task(cfg.task, cfg.task_options)
    train, test = task.splits(cfg.train_size, cfg.test_size, seed)
    check_disjoint(train, test, task.name)
    return {split: [(f"task {task.name} {split} item {i}", {"prompt": it.question, "response": it.answer})
                    for i, it in enumerate(items)]
            for split, items in (("train", train), ("test", test))}

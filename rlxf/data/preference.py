"""Preference pairs (prompt, chosen, rejected) for reward models and DPO.

    data = build_preference_data(cfg.data, tokenizer, seed=0)
    ex = data.train[0]   # ex.prompt_ids, ex.chosen_ids, ex.rejected_ids (responses end with eos)

``fields.chosen`` / ``fields.rejected`` hold response text, or whole conversations (lists of
messages ending with the assistant's answer). The prompt comes from ``fields.prompt`` /
``fields.messages`` when the record has it, else from the conversation before the answer
(which must then be the same in chosen and rejected).

An over-long response (``data.max_response_len`` with ``data.overlong_prompt: truncate``) keeps
its first tokens for DPO, whose policy continues the prompt, and its last for a reward model
(``keep_response="last"``): the RM's score is read at the eos that ends the response, and its
verifier cuts an over-long response the same way when it scores (``rlxf.rewards.reward_model``).

A pair whose chosen and rejected responses are the same tokens (after truncation to
``data.max_response_len``) states no preference: the DPO loss is log 2 whatever the policy, and
a reward model's accuracy on it is noise. Such pairs are dropped with a warning that counts
them (``<split>_dropped_identical`` in the report); a train split left empty is an error.

A text prompt that already ends with the chat template's generation prompt (``rlxf label``
writes them so) is refused while ``data.apply_chat_template`` is true
(``rlxf.data.templates.encode_prompts``).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from rlxf.config.data import DataConfig
from rlxf.data.errors import DataError
from rlxf.data.prompts import content_key, normalise_text
from rlxf.data.sources import Record, drop_held_out, fit_length, log_report, require_some, split_records
from rlxf.data.templates import (
    answer_text,
    check_messages,
    check_not_blank,
    check_prompt,
    encode_prompts,
    encode_responses,
    get_field,
)

log = logging.getLogger("rlxf.data")


@dataclass(frozen=True)
class PreferenceExample:
    uid: str
    prompt_ids: list[int]
    chosen_ids: list[int]         # preferred response tokens + eos
    rejected_ids: list[int]       # dispreferred response tokens + eos
    prompt_text: str
    chosen_text: str
    rejected_text: str


@dataclass
class PreferenceData:
    train: list[PreferenceExample]
    test: list[PreferenceExample]
    report: dict[str, int] = field(default_factory=dict)


def _response(value: Any, where: str, key: str) -> tuple[str, list | None]:
    """(answer text, the conversation before it or None) of a chosen/rejected value."""
    if isinstance(value, str):
        return value, None
    if not isinstance(value, list):
        raise DataError(f"{where}: field {key!r} must be the response text or a conversation (a list of chat "
                        f"messages) ending with it, got {type(value).__name__}; fix the record")
    msgs = check_messages(value, where, key)
    if msgs[-1]["role"] != "assistant":
        raise DataError(f"{where}: {key!r} is a conversation that does not end with an assistant message")
    return answer_text(msgs[-1], where, f"{key}[{len(msgs) - 1}]"), msgs[:-1]


def _first_difference(a: list[dict], b: list[dict]) -> int | None:
    """The first turn at which two conversations differ in role or in text (up to spacing and
    Unicode presentation, ``normalise_text``); None when they are the same."""
    def turn(m: dict) -> tuple:
        content = m.get("content")
        return m.get("role"), normalise_text(content) if isinstance(content, str) else content
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b) or turn(a[i]) != turn(b[i]):
            return i
    return None


def record_triple(record: dict, where: str, cfg: DataConfig) -> tuple[str | list, str, str]:
    f = cfg.fields
    chosen, chosen_ctx = _response(get_field(record, f.chosen, where, "chosen"), where, f.chosen)
    rejected, rejected_ctx = _response(get_field(record, f.rejected, where, "rejected"), where, f.rejected)
    key, config_key = (f.messages, "messages") if f.messages is not None else (f.prompt, "prompt")
    # two conversations that differ before the answer answer two prompts, whichever one is trained on;
    # spacing alone (a trailing newline one exporter kept) is not a difference, and chosen's turns are the prompt
    turn = _first_difference(chosen_ctx, rejected_ctx) if chosen_ctx and rejected_ctx else None
    if turn is not None:
        raise DataError(f"{where}: {f.chosen!r} and {f.rejected!r} have different conversations before the answer, "
                        f"so they answer different prompts (from turn {turn}: {chosen_ctx[turn:turn + 1]} vs "
                        f"{rejected_ctx[turn:turn + 1]}); fix the record (the two must share the turns before the "
                        f"answer) or give each response as the answer alone")
    if key is not None and key in record:
        prompt = record[key]
        prompt = check_messages(prompt, where, key) if config_key == "messages" else \
            check_prompt(prompt, where, key, config_key)
        conv, ctx = (f.chosen, chosen_ctx) if chosen_ctx else (f.rejected, rejected_ctx)
        # the answers were written to the conversation before them: another prompt (its last turn
        # alone, say) would train on them without the history they answer
        if ctx and content_key(ctx) != content_key(check_not_blank(prompt, where, key)):
            raise DataError(f"{where}: the prompt in {key!r} is not the conversation before the answer in {conv!r} "
                            f"({len(ctx)} turn(s)), so the pair would train on answers to another prompt; fix the "
                            f"record, or to read the prompt from the conversation remove {key!r} from the records "
                            f"(or point data.fields.{config_key} at a key they lack)")
    elif chosen_ctx or rejected_ctx:
        if not (chosen_ctx and rejected_ctx):
            conv, other = (f.chosen, f.rejected) if chosen_ctx else (f.rejected, f.chosen)
            raise DataError(f"{where}: {conv!r} is a conversation with turns before the answer but {other!r} is "
                            f"not, and the record has no prompt field {key!r}; give the prompt in "
                            f"data.fields.{config_key}, or both responses as the same conversation")
        prompt = chosen_ctx
    else:
        get_field(record, str(key), where, config_key)  # raises: names the field and the keys there are
        raise AssertionError("unreachable")
    if not isinstance(prompt, (str, list)):
        raise DataError(f"{where}: the prompt must be text or messages, got {type(prompt).__name__}")
    return check_not_blank(prompt, where, key if key is not None and key in record else f.chosen), chosen, rejected


def _after_truncation(cfg: DataConfig) -> str:
    return f" (after truncation to data.max_response_len={cfg.max_response_len})" if cfg.max_response_len else ""


def _examples(name: str, split: str, records: list[Record], cfg: DataConfig, tokenizer,
              counts: Counter, keys: dict[str, str], keep_response: str,
              context_window: int | None = None) -> list[PreferenceExample]:
    """The pairs of ``records``; each one's prompt ``content_key`` goes into ``keys`` by uid."""
    counts[f"{split}_read"] = len(records)
    triples = [record_triple(rec, where, cfg) for where, rec in records]
    prompts = encode_prompts(tokenizer, [t[0] for t in triples], system_prompt=cfg.system_prompt,
                             use_chat_template=cfg.apply_chat_template, wheres=[w for w, _ in records])
    responses = encode_responses(tokenizer, [r for _, c, rej in triples for r in (c, rej)])
    out = []
    for i, ((where, _), (prompt, chosen, rejected), (pids, ptext)) in enumerate(
            zip(records, triples, prompts, strict=True)):
        keys[f"{name}:{split}:{i}"] = content_key(prompt)
        kept_p = fit_length(pids, cfg.max_prompt_len, cfg.overlong_prompt, where, f"{split}_prompt", "last", counts)
        kept_c = fit_length(responses[2 * i], cfg.max_response_len, cfg.overlong_prompt, where,
                            f"{split}_response", keep_response, counts)
        kept_r = fit_length(responses[2 * i + 1], cfg.max_response_len, cfg.overlong_prompt,
                            where, f"{split}_response", keep_response, counts)
        if kept_p is None or kept_c is None or kept_r is None:
            continue
        longest = len(kept_p) + max(len(kept_c), len(kept_r))
        if context_window is not None and longest > context_window:
            # past it a model with learned positions (GPT-2) fails in an embedding lookup mid-run
            raise DataError(
                f"{where}: the pair is {longest} tokens (prompt {len(kept_p)} + longer response "
                f"{max(len(kept_c), len(kept_r))}), more than the model's context window of {context_window}; set "
                f"data.max_prompt_len and data.max_response_len (with data.overlong_prompt: truncate or drop) to at "
                f"most {context_window} together (now {cfg.max_prompt_len} and {cfg.max_response_len})")
        if kept_c == kept_r:
            counts[f"{split}_dropped_identical"] += 1
            continue
        out.append(PreferenceExample(f"{name}:{split}:{i}", kept_p, kept_c, kept_r,
                                     ptext if kept_p is pids else tokenizer.decode(kept_p), chosen, rejected))
    if counts[f"{split}_dropped_identical"]:
        log.warning("preference data: dropped %d of %d %s pairs whose chosen and rejected responses are the same "
                    "tokens%s: they state no preference", counts[f"{split}_dropped_identical"], len(records), split,
                    _after_truncation(cfg))
    return out


def build_preference_data(cfg: DataConfig, tokenizer, seed: int, *,
                          keep_response: Literal["first", "last"] = "first",
                          context_window: int | None = None) -> PreferenceData:
    """Train/test preference pairs from files or a HF dataset (tasks have no preferences).

    ``keep_response``: the end of an over-long response that truncation keeps, ``first`` (DPO)
    or ``last`` (a reward model, whose score is read at the final eos).
    ``context_window``: the model's longest sequence; a longer pair is an error naming its record.
    """
    if keep_response not in ("first", "last"):
        raise ValueError(f"keep_response must be 'first' or 'last', got {keep_response!r}")
    del seed  # file order is the data's own; shuffling is the trainer's sampler's job
    if cfg.mixture:   # its data.source is left at its default, `task`: the error below would blame that
        raise DataError(f"preference data (rlxf rm / rlxf dpo) is read from one source, not a mixture: data.sources "
                        f"({', '.join(s.label for s in cfg.sources)}) is for RL prompts and SFT. Give the pairs in "
                        f"data.source / data.train_path (one file: concatenate the sources' pairs)")
    if cfg.source == "task":
        raise DataError("preference data comes from files or a HF dataset (data.source=jsonl|json|parquet|csv|hf), "
                        "not from a procedural task")
    counts: Counter = Counter()
    splits: dict[str, list[PreferenceExample]] = {"train": [], "test": []}
    keys: dict[str, str] = {}
    for split in ("train", "test"):
        found = split_records(cfg, split)
        if found is not None:
            splits[split] = _examples(found[0], split, found[1], cfg, tokenizer, counts, keys, keep_response,
                                      context_window)
    # held-out prompts are never trained on (data.test_path: its prompts are removed from training):
    # the test accuracy would otherwise measure pairs the model was fitted to
    splits["train"], removed = drop_held_out(splits["train"], keys, {keys[e.uid] for e in splits["test"]})
    if removed:
        counts["train_removed_in_test"] = removed
    if not splits["train"] and counts["train_dropped_identical"] and not counts["train_removed_in_test"]:
        detail = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()) if k.startswith("train"))
        raise DataError(
            f"no train pairs left ({detail}): {counts['train_dropped_identical']} have the same chosen and rejected "
            f"response{_after_truncation(cfg)}, so they state no preference. Check that data.fields.chosen "
            f"({cfg.fields.chosen!r}) and data.fields.rejected ({cfg.fields.rejected!r}) name different responses"
            + (", or raise data.max_response_len if they differ only in the tokens it cuts" if cfg.max_response_len else "")
        )
    require_some(len(splits["train"]), "train", counts, cfg)
    report = dict(sorted(counts.items()))
    report["train"], report["test"] = len(splits["train"]), len(splits["test"])
    log_report("preference", report)
    return PreferenceData(splits["train"], splits["test"], report)

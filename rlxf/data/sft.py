"""Supervised examples (prompt ids + response ids ending in eos) from files or a task.

    data = build_sft_data(cfg.data, tokenizer, seed=0)
    data.train[0].prompt_ids, data.train[0].response_ids   # response_ids[-1] == tokenizer.eos_token_id

A record gives its prompt as text (``fields.prompt``) or as chat messages (``fields.messages``);
the response is ``fields.response``, or the final assistant message of the messages. A task
gives question (prompt) and answer (response). The prompt goes through the chat template with
the generation prompt; the response ids are the answer's own tokens plus eos, so prompt_ids +
response_ids is the sequence the model is trained to produce, exactly as it will generate it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rlxf.config.data import DataConfig
from rlxf.data.errors import DataError
from rlxf.data.prompts import content_key, read_task_records, source_config, source_seed, warn_ignored_fields
from rlxf.data.sources import (
    Record,
    drop_held_out,
    fit_length,
    log_report,
    require_evaluated,
    require_some,
    split_records,
)
from rlxf.data.templates import (
    answer_text,
    check_messages,
    check_not_blank,
    check_prompt,
    encode_prompts,
    encode_responses,
    get_field,
)


@dataclass(frozen=True)
class SFTExample:
    uid: str
    prompt_ids: list[int]         # context: the templated prompt, not trained on
    response_ids: list[int]       # targets: the response tokens + eos
    prompt_text: str
    response_text: str


@dataclass
class SFTData:
    train: list[SFTExample]
    test: list[SFTExample]
    report: dict[str, int] = field(default_factory=dict)
    weights: dict[str, float] | None = None   # a mixture: source name -> sampling weight (None: one source)
    # uid -> content_key of the prompt as written (before the template), for held-out removal
    keys: dict[str, str] = field(default_factory=dict, repr=False)


def record_pair(record: dict, where: str, cfg: DataConfig) -> tuple[str | list, str]:
    """(prompt text or messages, response text) of one record."""
    f = cfg.fields
    if f.messages is not None:
        msgs = check_messages(get_field(record, f.messages, where, "messages"), where, f.messages)
        if msgs[-1]["role"] == "assistant":
            if len(msgs) == 1:
                raise DataError(f"{where}: {f.messages!r} holds only an assistant message; nothing to prompt with")
            field = f"{f.messages}[{len(msgs) - 1}]"
            return check_not_blank(msgs[:-1], where, f.messages), _target(answer_text(msgs[-1], where, field),
                                                                          where, field)
        prompt: str | list = check_not_blank(msgs, where, f.messages)
    else:
        assert f.prompt is not None
        prompt = check_prompt(get_field(record, f.prompt, where, "prompt"), where, f.prompt, "prompt")
    if f.response is None:
        raise DataError(f"{where}: no response: the messages do not end with an assistant turn and "
                        f"data.fields.response is null")
    response = get_field(record, f.response, where, "response")
    if not isinstance(response, str):
        raise DataError(f"{where}: field {f.response!r} (data.fields.response) must be text, got {type(response).__name__}")
    return prompt, _target(response, where, f.response)


def _target(response: str, where: str, field: str) -> str:
    """``response``, or a DataError when it holds no text: an empty CSV cell or a field mapped
    wrongly would teach the model to end its turn at once (the target is the eos alone)."""
    if not response.strip():
        raise DataError(f"{where}: field {field!r} holds an empty response (no text but whitespace), so the "
                        f"example would train the model to answer with nothing; fix or remove the record, or "
                        f"point data.fields.response (or .messages) at the key that holds the answer")
    return response


def _examples(name: str, split: str, records: list[Record], cfg: DataConfig, tokenizer,
              counts: Counter, keys: dict[str, str], exclude: frozenset[str] = frozenset()) -> list[SFTExample]:
    """The examples of ``records``; each one's prompt ``content_key`` goes into ``keys`` by uid."""
    counts[f"{split}_read"] = len(records)
    pairs = [record_pair(rec, where, cfg) for where, rec in records]
    if exclude:
        kept = [i for i, (prompt, _) in enumerate(pairs) if content_key(prompt) not in exclude]
        if len(kept) < len(pairs):
            counts[f"{split}_removed_held_out"] = len(pairs) - len(kept)
        records, pairs = [records[i] for i in kept], [pairs[i] for i in kept]
    prompts = encode_prompts(tokenizer, [p for p, _ in pairs], system_prompt=cfg.system_prompt,
                             use_chat_template=cfg.apply_chat_template, wheres=[w for w, _ in records])
    responses = encode_responses(tokenizer, [r for _, r in pairs])
    out = []
    for i, ((where, _), (prompt, response), (pids, ptext), rids) in enumerate(
            zip(records, pairs, prompts, responses, strict=True)):
        keys[f"{name}:{split}:{i}"] = content_key(prompt)
        pids2 = fit_length(pids, cfg.max_prompt_len, cfg.overlong_prompt, where, f"{split}_prompt", "last", counts)
        rids2 = fit_length(rids, cfg.max_response_len, cfg.overlong_prompt, where, f"{split}_response", "first",
                           counts)
        if pids2 is None or rids2 is None:
            continue
        out.append(SFTExample(f"{name}:{split}:{i}", pids2, rids2,
                              ptext if pids2 is pids else tokenizer.decode(pids2), response))
    return out


def build_sft_data(cfg: DataConfig, tokenizer, seed: int, exclude: frozenset[str] = frozenset()) -> SFTData:
    """Train/test SFT examples per ``cfg``; DataError before training if none are left.

    ``exclude``: ``content_key``s of prompts that must not be trained on (an RL run's held-out
    prompts, for PPO-ptx demonstrations); training examples with such a prompt are removed and
    counted (``train_removed_held_out``).
    """
    if cfg.mixture:
        return _mixture(cfg, tokenizer, seed, exclude)
    data = _one_source(cfg, tokenizer, seed, exclude, Counter())
    log_report("SFT", data.report)
    return data


def _mixture(cfg: DataConfig, tokenizer, seed: int, exclude: frozenset[str]) -> SFTData:
    """``data.sources`` as SFT examples, uids ``<source>:<split>:<i>`` for the mixture sampler; a
    training example whose prompt is held out by any source is removed (and counted), as for RL."""
    warn_ignored_fields(cfg)
    weights = {s.label: s.weight for s in cfg.sources}
    built = {s.label: _one_source(source_config(cfg, s), tokenizer, source_seed(s, seed), exclude, Counter(),
                                  name=s.label, trained=s.weight > 0)
             for s in cfg.sources}
    # by the prompts as written, not as templated: sources may template differently
    held_out = {data.keys[e.uid] for data in built.values() for e in data.test}
    report: dict[str, int] = {}
    for name, data in built.items():
        data.train, removed = drop_held_out(data.train, data.keys, held_out)
        if removed:
            data.report["train_removed_held_out"] = removed
            data.report["train"] = len(data.train)
        if weights[name] == 0:   # evaluated only: no training examples needed
            require_evaluated(name, len(data.test), Counter(data.report))
        elif removed:
            require_some(len(data.train), "train", Counter(data.report), cfg)
        report |= {f"{name}/{k}": v for k, v in sorted(data.report.items())}
    train = [e for data in built.values() for e in data.train]
    test = [e for data in built.values() for e in data.test]
    report["train"], report["test"] = len(train), len(test)
    log_report("SFT", report)
    keys = {uid: key for data in built.values() for uid, key in data.keys.items()}
    return SFTData(train, test, report, weights, keys)


def _one_source(cfg: DataConfig, tokenizer, seed: int, exclude: frozenset[str], counts: Counter,
                name: str | None = None, trained: bool = True) -> SFTData:
    """One source's examples; ``trained`` False (a mixture source of weight 0) may have no
    training examples left."""
    splits: dict[str, list[SFTExample]] = {"train": [], "test": []}
    keys: dict[str, str] = {}
    if cfg.source == "task":
        task_records = read_task_records(cfg, seed)
        sft_cfg = cfg.model_copy(update={"fields": cfg.fields.model_copy(
            update={"prompt": "prompt", "messages": None, "response": "response"})})
        for split, records in task_records.items():
            splits[split] = _examples(name or str(cfg.task), split, records, sft_cfg, tokenizer, counts, keys,
                                      exclude if split == "train" else frozenset())
    else:
        for split in ("train", "test"):
            found = split_records(cfg, split)
            if found is not None:
                splits[split] = _examples(name or found[0], split, found[1], cfg, tokenizer, counts, keys,
                                          exclude if split == "train" else frozenset())
    # the held-out split is never trained on (data.test_path: its prompts are removed from training),
    # as for RL prompts: the run's evaluation would otherwise measure memorised answers
    splits["train"], removed = drop_held_out(splits["train"], keys, {keys[e.uid] for e in splits["test"]})
    if removed:
        counts["train_removed_in_test"] = removed
    if trained:
        require_some(len(splits["train"]), "train", counts, cfg)
    report = dict(sorted(counts.items()))
    report["train"], report["test"] = len(splits["train"]), len(splits["test"])
    return SFTData(splits["train"], splits["test"], report, keys=keys)

"""`rlxf generate`: format prompts as the model was trained to read them, sample responses with a
rollout engine, print them.

A run or checkpoint directory formats prompts as its training did: ``data.apply_chat_template``
and ``data.system_prompt`` of the run's ``config.yaml`` (a model trained on raw ``3+4=`` prompts
answers them wrongly when they are chat-templated). ``--chat-template/--no-chat-template``
overrides the template choice; a bare model directory or hub id uses the tokenizer's chat
template when it has one.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rlxf.cli.errors import UsageError


@dataclass(frozen=True)
class PromptFormat:
    """How prompts are rendered (``rlxf.data.templates.encode_prompts``) and why, for the log."""

    use_chat_template: bool
    system_prompt: str | None
    why: str


def trained_data(source: str):
    """The ``data`` section of the run that saved the model at ``source`` (a resolved local model
    directory), with its config.yaml; (None, None) for a model outside a run or a run without one."""
    import yaml
    from pydantic import ValidationError

    from rlxf.config.data import DataConfig
    from rlxf.models.paths import ModelPathError, resolve_model_dir

    try:
        run = resolve_model_dir(source).run
    except ModelPathError:
        return None, None
    saved = run / "config.yaml" if run is not None else None
    if saved is None or not saved.is_file():
        return None, None
    try:
        raw = yaml.safe_load(saved.read_text()) or {}
        return DataConfig.model_validate(raw.get("data") or {}), saved
    except (OSError, yaml.YAMLError, ValidationError, AttributeError) as e:
        print(f"note: cannot read the data settings of {saved} ({type(e).__name__}); prompts are formatted "
              f"as for a bare model (--chat-template/--no-chat-template choose)", file=sys.stderr)
        return None, None


def prompt_format(source: str, tokenizer, chat_template: bool | None) -> PromptFormat:
    """The training run's format where ``source`` belongs to one, ``chat_template`` over it when given;
    else the tokenizer's chat template when it has one, plain text when not."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    data, saved = trained_data(source) if Path(source).is_dir() else (None, None)
    if chat_template is not None:
        if chat_template and not has_template:
            raise UsageError(f"--chat-template: the tokenizer of {source} has no chat template; "
                             f"use --no-chat-template (plain text prompts)")
        system = data.system_prompt if data is not None else None
        why = "--chat-template" if chat_template else "--no-chat-template"
        return PromptFormat(chat_template, system, why + (f"; data.system_prompt of {saved}" if system else ""))
    if data is not None:
        why = f"data.apply_chat_template: {str(data.apply_chat_template).lower()}"
        why += " and data.system_prompt" if data.system_prompt else ""
        return PromptFormat(data.apply_chat_template, data.system_prompt, f"{why} of {saved}")
    if has_template:
        return PromptFormat(True, None, "the tokenizer's chat template")
    return PromptFormat(False, None, f"the tokenizer of {source} has no chat template")


def read_prompts_file(path: Path) -> tuple[list[str | list[dict]], list[str]]:
    """The prompts of a JSONL file (``{"prompt": TEXT}`` or ``{"messages": [...]}`` a line) and
    where each is (``file:line``), or an error naming the line and what it must hold."""
    import json

    from rlxf.data.templates import check_messages, check_not_blank

    if not path.is_file():
        raise UsageError(f"--prompts-file {path} {'is a directory' if path.is_dir() else 'does not exist'}; "
                         f"give a JSONL file with one {{\"prompt\": ...}} or {{\"messages\": [...]}} a line")
    raw = path.read_bytes()
    try:  # split on newlines only: JSON strings may hold U+2028, which str.splitlines splits on
        lines = raw.decode("utf-8").removeprefix("\ufeff").split("\n")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte {raw[e.start]:#04x}); save the file as UTF-8") from None
    prompts, wheres = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except ValueError as e:
            raise UsageError(f"{where}: not a JSON record ({e}); write one JSON object a line") from None
        if not isinstance(record, dict) or ("prompt" in record) == ("messages" in record):
            raise UsageError(f"{where}: a line must be an object with one of \"prompt\" (text) or \"messages\" "
                             f"(a chat), got {line.strip()[:80]}")
        if "messages" in record:
            prompt = check_not_blank(check_messages(record["messages"], where, "messages"), where, "messages")
        elif isinstance(record["prompt"], str):
            prompt = check_not_blank(record["prompt"], where, "prompt")
        else:
            raise UsageError(f"{where}: \"prompt\" must be text, got {type(record['prompt']).__name__}; "
                             f"give a chat as \"messages\"")
        prompts.append(prompt)
        wheres.append(where)
    if not prompts:
        raise UsageError(f"--prompts-file {path} holds no prompts; write one JSON object a line")
    return prompts, wheres


def _shown(prompt: str | list[dict]) -> str:
    """A prompt as its header line shows it: the text, or a chat's last turn."""
    if isinstance(prompt, str):
        return prompt
    return f"[{len(prompt)} messages] {prompt[-1]['role']}: {prompt[-1]['content']}"


def run(model: str, prompts: list[str], backend: str = "native", n: int = 1, temperature: float = 0.0,
        max_new_tokens: int = 64, chat_template: bool | None = None, prompts_file: Path | None = None) -> None:
    from rlxf.models.loading import ModelLoadError, check_source, check_vocab, load_model, load_tokenizer
    from rlxf.models.tokenizer import reply_text
    from rlxf.rollout import BACKENDS, SamplingParams, build_engine

    wheres = [f"prompt {i}" for i in range(len(prompts))]
    prompts = list(prompts)
    blank = next((w for p, w in zip(prompts, wheres, strict=True) if not p.strip()), None)
    if blank is not None:  # as --prompts-file refuses one: nothing to continue but the template, if any
        raise UsageError(f"{blank} is empty (no text but whitespace); give the text the model is to continue, "
                         f"e.g. \"12+34=\"")
    if prompts_file is not None:
        more, more_wheres = read_prompts_file(prompts_file)
        prompts, wheres = [*prompts, *more], [*wheres, *more_wheres]
    if not prompts:
        raise UsageError("no prompts: give prompt texts after the model, or --prompts-file FILE.jsonl")
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    if n > 1 and temperature == 0:  # as eval.pass_k is refused at rollout.temperature 0
        raise UsageError(f"-n {n} at --temperature 0 (greedy, the default) prints the one greedy response {n} "
                         f"times; pass --temperature 1 (any > 0) to sample {n} different ones, or leave out -n")
    try:
        sampling = SamplingParams(n=n, temperature=temperature, max_new_tokens=max_new_tokens)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        # a missing path named as the model, not its tokenizer; a LoRA adapter directory loads through its base
        source = check_source(model, "model", local_first=True, adapters=True)
        tokenizer = load_tokenizer(model)
        fmt = prompt_format(source, tokenizer, chat_template)
        policy = load_model(model, device="auto", dtype="auto").eval()
        check_vocab(policy, tokenizer, model_what=f"model {model}")
    except ModelLoadError as e:
        raise UsageError(str(e)) from None
    from rlxf.data.templates import encode_prompts

    chat = next((w for p, w in zip(prompts, wheres, strict=True) if not isinstance(p, str)), None)
    if chat is not None and not fmt.use_chat_template:
        raise UsageError(f"{chat}: a chat (\"messages\") needs the chat template, but prompts are plain text "
                         f"here ({fmt.why}); pass --chat-template, or give the prompt as text")
    print(f"prompts: {'chat template' if fmt.use_chat_template else 'plain text'} ({fmt.why})", file=sys.stderr)
    encoded = encode_prompts(tokenizer, prompts, system_prompt=fmt.system_prompt,
                             use_chat_template=fmt.use_chat_template, wheres=wheres)
    engine = build_engine(backend, policy, tokenizer)
    start = time.perf_counter()
    groups = engine.generate([ids for ids, _ in encoded], sampling)
    seconds = time.perf_counter() - start
    tokens = failed = 0
    for i, (prompt, group) in enumerate(zip(prompts, groups, strict=True)):
        print(f"=== prompt {i}: {_shown(prompt)}")
        for j, c in enumerate(group):
            tokens += len(c.response_ids)
            if c.finish_reason == "error":
                print(f"--- sample {j} failed: {c.error}")
                failed += 1
                continue
            text = reply_text(tokenizer, c.response_ids)
            print(f"--- sample {j} ({c.finish_reason}, {len(c.response_ids)} tokens, "
                  f"log-prob {sum(c.logprobs):.2f})\n{text}")
    print(f"[{type(engine).__name__}: {tokens} tokens in {seconds:.2f}s]", file=sys.stderr)
    if failed:  # exit 1, so that a script does not take the failures above for answers
        import typer

        print(f"error: {failed} of {sum(map(len, groups))} samples failed; the reasons are above", file=sys.stderr)
        raise typer.Exit(1)

"""Records -> chat messages -> token ids, through the tokenizer's chat template.

    ids, text = encode_prompt(tokenizer, "12+34=")                   # user turn + generation prompt
    ids, text = encode_prompt(tokenizer, [{"role": "user", "content": "hi"}], system_prompt="Be brief.")
    response_ids = encode_response(tokenizer, "46")                  # ids of "46" + [eos]

Token-in, token-out: ``ids`` is what the engine generates from and what the trainer trains
on. The text is kept for logs and judges only; nothing downstream tokenizes it again.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Any

from rlxf.data.errors import DataError
from rlxf.envs.base import ENV_ROLES

Messages = list[dict[str, Any]]
# the roles chat templates render: the model's own turn and those an environment may send
# ("developer" is OpenAI's instructions, "ipython" Llama 3.1's tool results)
ROLES = (*ENV_ROLES, "assistant")
# turns that instruct rather than ask: not a prompt's question (``check_not_blank``, ``content_key``)
SYSTEM_ROLES = ("system", "developer")


def get_field(record: dict[str, Any], name: str, where: str, config_key: str) -> Any:
    """``record[name]``, or an error naming the field, its config key, and the keys that exist."""
    if name not in record:
        raise DataError(
            f"{where}: field {name!r} (data.fields.{config_key}) is missing; the record has keys: "
            f"{', '.join(map(str, record)) or '(none)'}. Set data.fields.{config_key} to the key that holds it."
        )
    return record[name]


def _json_text_hint(value: Any) -> str:
    """What to do about a chat written as JSON text (a CSV cell can hold only text)."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            json.loads(value)
        except ValueError:
            return ""
        return (" (JSON text of a list: a CSV cell holds only text. Write the data as JSONL, where a field can "
                "be a list, e.g. pandas' df.assign(messages=df.messages.map(json.loads)).to_json(path, "
                "orient='records', lines=True), or as parquet)")
    return ""


def check_messages(messages: Any, where: str, field: str) -> Messages:
    """A list of {"role", "content"} dicts with known roles, or a DataError saying what is wrong.

    Content given as parts comes back as its text (``content_text``), so the template, the
    held-out key and the blank check all read one string."""
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: field {field!r} must be a non-empty list of chat messages, "
                        f"got {type(messages).__name__}{_json_text_hint(messages)}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DataError(f"{where}: {field}[{i}] must be an object with 'role' and 'content', got {m!r:.80}")
        if m["role"] not in ROLES:
            raise DataError(f"{where}: {field}[{i}] has role {m['role']!r}; valid roles: {', '.join(ROLES)}. "
                            f"Rename it in the data to the one it means (ShareGPT's 'human' and 'gpt' are 'user' "
                            f"and 'assistant'; Gemma's 'model' is 'assistant')")
        # text, or a list of content parts; null only for an assistant turn that calls tools (OpenAI format)
        content = m["content"]
        if not (isinstance(content, (str, list)) or (content is None and m["role"] == "assistant"
                                                       and m.get("tool_calls"))):
            raise DataError(f"{where}: {field}[{i}] ({m['role']}) has content of type {type(content).__name__}; "
                            f"a message's content must be text")
        out.append({**m, "content": content_text(content, where, f"{field}[{i}]")})
    return out


def content_text(content: Any, where: str, field: str) -> str | None:
    """A message's content as the one string the chat template renders: text as it is, text parts
    joined with nothing between them (as the templates that read parts render them, Qwen2-VL's
    and Llama 3.2's, and as rlxf's chat endpoint passes them on), None as None.

    The one reader of content parts: most chat templates concatenate ``message.content`` as a
    string (a TypeError on a list) or filter it (Llama 3's ``| trim``: the list's Python repr),
    and a key joined otherwise would tell the same model input apart. A part that is not text (an
    image) is an error: the policy reads text only, and would train without what the part held."""
    if not isinstance(content, list):
        return content
    texts = []
    for j, part in enumerate(content):
        text = _part_text(part)
        if not isinstance(text, str):
            kind = part.get("type", "text") if isinstance(part, dict) else type(part).__name__
            what = (f"is a text part whose 'text' is {type(text).__name__}" if kind == "text" else
                    f"is a {kind!r} part; rlxf reads text only")
            raise DataError(f"{where}: {field}.content[{j}] {what} (parts {{\"type\": \"text\", \"text\": "
                            f"\"...\"}}): fix or drop the part, or drop the record")
        texts.append(text)
    return "".join(texts)


def answer_text(message: dict[str, Any], where: str, field: str) -> str:
    """The text of an assistant message that is a training target (an SFT response, a chosen or
    rejected answer), its parts joined (``content_text``). A turn that only calls tools has no
    text to train on: an error, where ``str()`` would train on ``"None"``."""
    content = content_text(message["content"], where, field)
    if content is None:
        raise DataError(f"{where}: {field} is an assistant turn with no text content (a tool call); a training "
                        f"target must be text: end the conversation with the assistant's text answer")
    return content


def check_prompt(value: Any, where: str, field: str, config_key: str) -> str | Messages:
    """A prompt as text or chat messages, or a DataError naming the record, field and type.

    Checked when the record is read, so a wrong type is reported where it is, not as a
    template error (or a TypeError) while the batch is rendered."""
    if isinstance(value, str):
        return check_not_blank(value, where, field)
    if isinstance(value, list):
        return check_not_blank(check_messages(value, where, field), where, field)
    raise DataError(f"{where}: field {field!r} (data.fields.{config_key}) must be text or a list of chat "
                    f"messages, got {type(value).__name__}; fix the record, or point data.fields.{config_key} "
                    f"at the field that holds the prompt")


def check_not_blank(prompt: str | Messages, where: str, field: str) -> str | Messages:
    """``prompt``, or a DataError when it holds no text (only whitespace, or turns that are all
    system, developer or blank): an empty CSV cell or a field mapped wrongly, which would
    otherwise train on the template alone, and share one held-out key with every other blank
    prompt."""
    if isinstance(prompt, str):
        blank = not prompt.strip()
    else:
        blank = all(m["role"] in SYSTEM_ROLES or _blank_content(m.get("content")) for m in prompt)
    if blank:
        raise DataError(f"{where}: field {field!r} holds an empty prompt (no text but whitespace"
                        f"{'' if isinstance(prompt, str) else ' outside system and developer turns'}); fix or remove "
                        f"the record, or point data.fields at the key that holds the prompt")
    return prompt


def _part_text(part: Any) -> Any:
    """A content part's text (a ``{"type": "text", "text": ...}`` part, or a bare string); any
    other part as it is."""
    return part.get("text") if isinstance(part, dict) and part.get("type", "text") == "text" else part


def _blank_content(content: Any) -> bool:
    """No text in a message's content (an image part, say, is not blank)."""
    if isinstance(content, list):
        return all(_blank_content(_part_text(p)) for p in content)
    return content is None or (isinstance(content, str) and not content.strip())


def with_system(messages: Messages, system_prompt: str | None) -> Messages:
    """Prepend ``system_prompt`` unless the conversation already starts with a system turn."""
    if system_prompt is None or (messages and messages[0]["role"] == "system"):
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]


def render_prompt(
    tokenizer,
    prompt: str | Messages,
    *,
    system_prompt: str | None = None,
    use_chat_template: bool = True,
) -> str:
    """The prompt text, ending where the assistant's answer starts.

    With the chat template: ``prompt`` (text becomes one user turn) goes through
    ``tokenizer.chat_template`` with ``add_generation_prompt=True``. Without it (base models):
    the text, after ``system_prompt`` and a blank line.
    """
    if not use_chat_template:
        if not isinstance(prompt, str):
            raise DataError("data.apply_chat_template is false but the prompt is a chat `messages` list; "
                            "use a text prompt field or turn the chat template on")
        return prompt if system_prompt is None else f"{system_prompt}\n\n{prompt}"
    if getattr(tokenizer, "chat_template", None) is None:
        raise DataError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; set "
            f"model.chat_template (Jinja text or file) or data.apply_chat_template=false"
        )
    messages = _chat(prompt)
    if messages[-1]["role"] == "assistant":
        raise DataError("the prompt's last message is an assistant turn; a prompt must end with the turn "
                        "the model answers (drop the answer from the prompt messages)")
    return tokenizer.apply_chat_template(with_system(messages, system_prompt), tokenize=False,
                                         add_generation_prompt=True)


def encode_prompt(
    tokenizer,
    prompt: str | Messages,
    *,
    system_prompt: str | None = None,
    use_chat_template: bool = True,
) -> tuple[list[int], str]:
    """(prompt ids, the text they came from); see ``render_prompt``.

    With the chat template the ids are exactly those of
    ``tokenizer.apply_chat_template(..., add_generation_prompt=True, tokenize=True)`` (the
    template writes its own special tokens); without it the tokenizer adds its own (BOS).
    """
    return encode_prompts(tokenizer, [prompt], system_prompt=system_prompt, use_chat_template=use_chat_template)[0]


def encode_prompts(
    tokenizer,
    prompts: list[str | Messages],
    *,
    system_prompt: str | None = None,
    use_chat_template: bool = True,
    wheres: list[str] | None = None,
) -> list[tuple[list[int], str]]:
    """``encode_prompt`` over many prompts, rendered and tokenized in one batch call each: the
    same ids as one by one, faster. A batch of text prompts encoded again with a tokenizer that
    encodes alike (another object loaded from the same files: the quickstart encodes its
    20,000-prompt splits in every stage) is read from a small cache (``_encoded``).

    A text prompt that already ends with the template's generation prompt (``rlxf label``
    writes them so) is refused while the template is on: templated twice, it would train on
    prompts the policy never sees. ``wheres`` (one per prompt: ``file:line``) is named in the error of a prompt that cannot be
    rendered (the template fails on it, or it ends with an assistant turn)."""
    if _CACHED_BATCH[0] <= len(prompts) <= _CACHED_BATCH[1] and all(isinstance(p, str) for p in prompts):
        fingerprint = _fingerprint(tokenizer)
        if fingerprint is not None:
            batch = _Batch(type(tokenizer), fingerprint, tuple(prompts), system_prompt, use_chat_template,
                           tokenizer, wheres)
            return [(list(ids), text) for ids, text in _encoded(batch)]
    return _encode(tokenizer, prompts, system_prompt, use_chat_template, wheres)


# the batches worth a cache entry: a fingerprint of a large vocabulary (``to_str``) costs about what
# encoding a thousand prompts does, and the largest entry stays a few tens of MB
_CACHED_BATCH = (1000, 100_000)


@dataclasses.dataclass(frozen=True)
class _Batch:
    """What the encoding of a batch of text prompts depends on (compared, the cache's key), and
    the tokenizer object and ``wheres`` (not compared: any object with that fingerprint encodes
    alike, and ``wheres`` only names a prompt in an error, which is never cached)."""

    tokenizer_class: type
    fingerprint: str
    prompts: tuple[str, ...]
    system_prompt: str | None
    use_chat_template: bool
    tokenizer: Any = dataclasses.field(compare=False)
    wheres: list[str] | None = dataclasses.field(compare=False)


@functools.lru_cache(maxsize=4)
def _encoded(batch: _Batch) -> tuple[tuple[tuple[int, ...], str], ...]:
    encoded = _encode(batch.tokenizer, list(batch.prompts), batch.system_prompt, batch.use_chat_template, batch.wheres)
    return tuple((tuple(ids), text) for ids, text in encoded)


def _fingerprint(tokenizer) -> str | None:
    """A hash of everything a prompt's encoding depends on, for a fast tokenizer whose class adds
    nothing to rendering and tokenizing (``_plain_fast``): the whole backend (vocabulary, merges,
    normalizer, pre-tokenizer, post-processor with its BOS, added tokens), the chat template and
    the special tokens it is rendered with. None for any other tokenizer, and for a template that
    reads the clock (``strftime_now``: today's date), whose encoding is not a function of these."""
    if not _plain_fast(tokenizer):
        return None
    from transformers import PreTrainedTokenizerBase

    template = getattr(tokenizer, "chat_template", None)
    if ("strftime_now" in str(template) or type(tokenizer).apply_chat_template is not
            PreTrainedTokenizerBase.apply_chat_template
            or {"apply_chat_template", *_ENCODE_METHODS} & set(vars(tokenizer))):   # patched on the object
        return None
    # not the backend's encode_special_tokens: each call of the tokenizer sets it (``token_ids``)
    parts = (tokenizer.backend_tokenizer.to_str(), repr(template), repr(tokenizer.special_tokens_map),
             repr(getattr(tokenizer, "split_special_tokens", False)))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _encode(tokenizer, prompts: list[str | Messages], system_prompt: str | None, use_chat_template: bool,
            wheres: list[str] | None) -> list[tuple[list[int], str]]:
    if not prompts:
        return []
    tail = generation_prompt(tokenizer) if use_chat_template and getattr(tokenizer, "chat_template", None) else ""
    for i, p in enumerate(prompts):
        if tail and isinstance(p, str) and p.rstrip().endswith(tail):
            raise DataError(
                f"{wheres[i] if wheres else f'prompt {i}'}: the prompt already ends with the chat template's "
                f"generation prompt {tail!r}, so it was templated before (`rlxf label` writes its prompts so), and "
                f"data.apply_chat_template=true would template it again; set data.apply_chat_template: false "
                f"to read it as it is")
    texts = _render_batch(tokenizer, prompts, system_prompt) if use_chat_template else None
    if texts is None:   # no template, or some prompt fails: one by one, to name the prompt that does
        texts = []
        for i, p in enumerate(prompts):
            try:
                texts.append(render_prompt(tokenizer, p, system_prompt=system_prompt,
                                           use_chat_template=use_chat_template))
            except Exception as e:  # noqa: BLE001 - a chat template raises whatever its Jinja code raises
                if wheres is None:
                    raise
                detail = str(e) if isinstance(e, DataError) else f"the chat template failed: {type(e).__name__}: {e}"
                if system_prompt is not None and not isinstance(e, DataError):
                    detail += ("; data.system_prompt is set, and some chat templates (Gemma's) have no system turn: "
                               "unset it, or write the instruction into the prompts")
                raise DataError(f"{wheres[i]}: cannot render the prompt: {detail}") from None
    ids = token_ids(tokenizer, texts, add_special_tokens=not use_chat_template)
    bos = getattr(tokenizer, "bos_token", None)
    if not use_chat_template and bos:   # a text that holds its BOS already (a templated prompt) gets no second
        has_bos = [i for i, t in enumerate(texts) if t.startswith(bos)]
        for i, again in zip(has_bos, token_ids(tokenizer, [texts[i] for i in has_bos], add_special_tokens=False),
                            strict=True):
            ids[i] = again
    return [(list(i), t) for i, t in zip(ids, texts, strict=True)]


def _chat(prompt: str | Messages) -> Messages:
    """The messages the template renders: text as one user turn; messages with their content
    parts as text (``content_text``), for callers that pass messages not read by ``check_messages``."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{**m, "content": content_text(m.get("content"), "the prompt", f"messages[{i}]")}
            if isinstance(m, dict) and isinstance(m.get("content"), list) else m for i, m in enumerate(prompt)]


def _render_batch(tokenizer, prompts: list[str | Messages], system_prompt: str | None) -> list[str] | None:
    """The prompts through the chat template in one ``apply_chat_template`` call (as
    ``render_prompt`` renders each: its per-call overhead, not the template, is most of the time);
    None when the tokenizer has no template or some prompt would fail, for ``render_prompt``
    to say which and why."""
    if getattr(tokenizer, "chat_template", None) is None:
        return None
    try:
        chats = [_chat(p) for p in prompts]
    except DataError:
        return None
    if any(chat[-1]["role"] == "assistant" for chat in chats):
        return None
    try:
        texts = tokenizer.apply_chat_template([with_system(chat, system_prompt) for chat in chats], tokenize=False,
                                              add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a chat template raises whatever its Jinja code raises
        return None
    return texts if isinstance(texts, list) and len(texts) == len(prompts) else None


# the methods a fast tokenizer encodes a batch through; a class that overrides one (CodeLlama's
# fill-in-the-middle, say) does more than its Rust backend, so it is called as itself
_ENCODE_METHODS = ("__call__", "_call_one", "encode_plus", "batch_encode_plus", "_encode_plus", "_batch_encode_plus")


def _plain_fast(tokenizer) -> bool:
    """A fast tokenizer of a class that overrides none of the methods a batch is encoded through."""
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        return False
    return isinstance(tokenizer, PreTrainedTokenizerFast) and all(
        getattr(type(tokenizer), m, None) is getattr(PreTrainedTokenizerFast, m, None) for m in _ENCODE_METHODS)


def token_ids(tokenizer, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
    """``tokenizer(texts, add_special_tokens=...)["input_ids"]``, from the Rust backend's
    ``encode_batch`` directly where that is what the call would run (a fast tokenizer of a class
    that adds nothing, its backend set to neither truncate nor pad): the Python wrapping of each
    encoding (masks, offsets, overflow checks) took as long as the tokenizing."""
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if (_plain_fast(tokenizer) and backend is not None and backend.truncation is None and backend.padding is None
            and getattr(backend, "encode_special_tokens", False) == bool(getattr(tokenizer, "split_special_tokens", False))):
        return [e.ids for e in backend.encode_batch(texts, add_special_tokens=add_special_tokens)]
    return [list(i) for i in tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]]


def generation_prompt(tokenizer) -> str:
    """What the chat template appends to open the assistant's turn (ChatML: ``<|im_start|>assistant``);
    "" when it appends nothing or cannot say."""
    probe = [{"role": "user", "content": "x"}]
    try:
        with_gen = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        without = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=False)
    except Exception:  # noqa: BLE001 - a chat template raises whatever its Jinja code raises
        return ""
    return with_gen[len(without):].strip() if with_gen.startswith(without) else ""


def encode_response(tokenizer, text: str) -> list[int]:
    """Ids of an assistant answer followed by the eos token (the end of the assistant turn).

    Used for supervised targets (SFT, preference pairs); RL responses come from the engine as
    ids and are never re-encoded.
    """
    return encode_responses(tokenizer, [text])[0]


def encode_responses(tokenizer, texts: list[str]) -> list[list[int]]:
    """``encode_response`` over many answers in one call of the tokenizer (the same ids: a batch
    without padding encodes each text as alone), not one per SFT example."""
    if not texts:
        return []
    if tokenizer.eos_token_id is None:
        raise DataError("the tokenizer has no eos token, so a response cannot be terminated; set one")
    # special-token text in a response stays text: parsed, "<|im_end|>" written by a demonstration
    # (or a policy, for the reward model) would end the turn where the text only names it
    ids = tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return [[*i, tokenizer.eos_token_id] for i in ids]

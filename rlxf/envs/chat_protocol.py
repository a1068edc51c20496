"""The OpenAI chat-completions wire format as rlxf's endpoint speaks it (``rlxf.envs.chat_server``):
what a request may ask for, and the body or Server-Sent Events a model turn is answered with.

    request = ChatRequest.model_validate(json_body)
    problem = refusal(request)             # None, or why rlxf cannot answer it as asked (a 400)
    body = completion_body(request, reply_id, turn, tokenizer)       # chat.completion
    events = completion_events(body, include_usage=True)            # the same as chat.completion.chunk SSE

An episode is one linear trajectory sampled from the policy and recorded token by token, so a
request is refused, saying why and what to do instead, when answering it would mean recording
something else than what was asked: several choices (``n > 1``), a change to sampling the engine
does not make (penalties, ``logit_bias``, a ``response_format`` that constrains decoding), a
forced tool call, log-probs of tokens not sampled (``top_logprobs``), or a field this module does
not know (ignoring it would change the program's request without a word). Fields that change
nothing the model sees or samples are accepted (``HARMLESS``).

A stream is sent after the turn is generated (an engine call samples whole turns): the content as
one chunk, the tool calls as one, then the finish reason and, with ``stream_options:
{"include_usage": true}``, the usage. Its chunks are built from the non-streaming body, so both
say the same and the episode records the same turn either way.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlxf.envs.tools import TOOL_CALL, call_id, parse_call

# Fields an OpenAI client may send that change nothing the model sees or samples.
HARMLESS = frozenset({"metadata", "store", "parallel_tool_calls", "service_tier", "prompt_cache_key",
                      "safety_identifier"})


class ChatRequest(BaseModel):
    """A ``/v1/chat/completions`` request: the fields rlxf honours or checks (``refusal``)."""

    model_config = ConfigDict(extra="allow")   # kept, so that ``refusal`` can name what is not supported
    model: str = "rlxf-policy"
    messages: list[dict[str, Any]] = Field(..., min_length=1)
    user: str = "default"                       # the episode id (an episode's own base URL needs none)
    temperature: float | None = Field(None, ge=0.0)   # None (or unsent): 1.0
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0, lt=2**63)   # the engines' seed range
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    response_format: dict[str, Any] | None = None
    modalities: list[str] | None = None

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


def refusal(request: ChatRequest) -> str | None:
    """Why the endpoint cannot answer ``request`` as asked (a 400), or None."""
    if request.n not in (None, 1):
        return (f"n={request.n}: an episode is one linear trajectory, so each request records exactly one "
                f"model turn; for n samples of the same prompt run n episodes (rollout.n gives each prompt n "
                f"episodes, each with its own base URL)")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(request, name):
            return (f"{name}={getattr(request, name)}: rlxf's engine samples without penalties, so the turn "
                    f"would come from another distribution than the one asked for; drop it or set it to 0")
    if request.logit_bias:
        return ("logit_bias: rlxf's engine does not bias logits, and the trainer's log-probs are those of the "
                "unbiased policy; drop it")
    if request.response_format and request.response_format.get("type") != "text":
        return (f"response_format {request.response_format.get('type')!r}: rlxf samples the policy without "
                f"constrained decoding; drop it and parse or validate the reply in the program")
    if request.top_logprobs:
        return (f"top_logprobs={request.top_logprobs}: the engine reports the log-prob of each sampled token "
                f"only; use logprobs=true with top_logprobs 0 (or unset)")
    if request.modalities and set(request.modalities) != {"text"}:
        return f"modalities {request.modalities}: the policy writes text only"
    if "functions" in (request.model_extra or {}) or "function_call" in (request.model_extra or {}):
        return ("functions / function_call (the deprecated function-calling fields): send `tools` "
                "[{\"type\": \"function\", \"function\": {...}}] and read the reply's `tool_calls`")
    problem = _tools_problem(request.tools) or _tool_choice_problem(request.tool_choice)
    if problem:
        return problem
    unknown = sorted(set(request.model_extra or {}) - HARMLESS)
    if unknown:
        return (f"unsupported field(s) {', '.join(unknown)}: rlxf's endpoint does not implement them, and "
                f"ignoring them would change the request without saying so; drop them (rlxf honours model, "
                f"messages, user, temperature, top_p, max_tokens, max_completion_tokens, seed, stop, stream, "
                f"stream_options, tools, tool_choice, logprobs; it accepts and ignores {', '.join(sorted(HARMLESS))})")
    return None


def _tools_problem(tools: list[dict[str, Any]] | None) -> str | None:
    for i, tool in enumerate(tools or []):
        fn = tool.get("function")
        if tool.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return (f"tools[{i}] is not a function tool: rlxf takes "
                    f"{{\"type\": \"function\", \"function\": {{\"name\": ..., \"description\": ..., "
                    f"\"parameters\": {{...}}}}}}, got {json.dumps(tool)[:120]}")
    return None


def _tool_choice_problem(choice: str | dict[str, Any] | None) -> str | None:
    if choice in (None, "auto", "none"):
        return None
    return (f"tool_choice {json.dumps(choice)}: rlxf samples the policy as it is and cannot force a tool call; "
            f"use \"auto\" (the model decides) or \"none\" (its tool calls are not parsed), and check the "
            f"reply's tool_calls in the program")


def tools_change(first: list[dict[str, Any]] | None, now: list[dict[str, Any]] | None) -> str | None:
    """What differs between an episode's tools and a later request's, or None when nothing does."""
    if (first or None) == (now or None):
        return None
    def by_name(tools):
        return {t["function"]["name"]: t for t in tools or []}
    a, b = by_name(first), by_name(now)
    changes = [f"{what} {', '.join(repr(n) for n in names)}" for what, names in (
        ("added", [n for n in b if n not in a]), ("removed", [n for n in a if n not in b]),
        ("changed", [n for n in a if n in b and a[n] != b[n]])) if names]
    return "; ".join(changes) or "the same tools in another order"


def tool_calls(text: str, turn: int) -> list[dict[str, Any]]:
    """The ``<tool_call>`` blocks of model turn ``turn`` (from 0) as OpenAI tool_calls, malformed
    blocks left out (those the built-in tool environments answer with an error: not JSON, no string
    ``name``, ``arguments`` not an object), so every call's ``arguments`` decode to an object; each
    call's id is the one the built-in tool environments give the block (``rlxf.envs.tools.call_id``)."""
    calls = []
    for index, block in enumerate(TOOL_CALL.findall(text)):
        try:
            name, args = parse_call(block)
        except ValueError:
            continue
        if name is not None and args is not None:
            calls.append({"id": call_id(turn, index), "type": "function",
                          "function": {"name": name, "arguments": json.dumps(args)}})
    return calls


@dataclass(frozen=True)
class ModelTurn:
    """One model turn as the endpoint recorded it."""

    index: int                 # the turn's place in its episode (0 first)
    text: str                  # the reply (control tokens removed: rlxf.models.tokenizer.reply_text)
    finish_reason: str         # the engine's: stop | length
    token_ids: list[int]       # as sampled (the end-of-turn token included)
    logprobs: list[float]      # the engine's log-prob of each (rlxf.rollout.base: which log-prob)
    prompt_tokens: int         # the episode's tokens before the turn


def completion_body(request: ChatRequest, reply_id: str, turn: ModelTurn, tokenizer) -> dict[str, Any]:
    """The ``chat.completion`` answering ``request`` with ``turn``."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    finish = "length" if turn.finish_reason == "length" else "stop"
    calls = tool_calls(turn.text, turn.index) if request.tool_choice != "none" else []
    if calls:
        message["tool_calls"], finish = calls, "tool_calls"
    logprobs = {"content": token_logprobs(tokenizer, turn)} if request.logprobs else None
    completion_tokens = len(turn.token_ids)
    return {"id": reply_id, "object": "chat.completion", "created": int(time.time()), "model": request.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}],
            "usage": {"prompt_tokens": turn.prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": turn.prompt_tokens + completion_tokens}}


def token_logprobs(tokenizer, turn: ModelTurn) -> list[dict[str, Any]]:
    """OpenAI's ``logprobs.content``: one entry per sampled token, the end-of-turn token included."""
    out = []
    for token_id, logprob in zip(turn.token_ids, turn.logprobs, strict=True):
        token = tokenizer.decode([token_id], skip_special_tokens=False)
        out.append({"token": token, "logprob": logprob, "bytes": list(token_bytes(tokenizer, token_id, token)),
                    "top_logprobs": []})
    return out


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet (character -> the byte it stands for), which byte-level
    vocabularies (GPT-2, Llama 3, Qwen, rlxf's own) write their tokens in."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)}
    alphabet, extra = {}, 0
    for b in range(256):
        if b in printable:
            alphabet[chr(b)] = b
        else:
            alphabet[chr(256 + extra)], extra = b, extra + 1
    return alphabet


_BYTE_ALPHABET = _byte_alphabet()
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_bytes(tokenizer, token_id: int, text: str) -> bytes:
    """The bytes token ``token_id`` stands for (``text``: its decoding). A token holding part of a
    character (an emoji is several byte tokens) decodes to U+FFFD, and OpenAI's ``bytes`` are what
    lets a client join such tokens back into the character, so its bytes come from the vocabulary:
    a SentencePiece byte-fallback piece ``<0xF0>``, or a byte-level BPE piece."""
    if "\ufffd" not in text:
        return text.encode()
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if isinstance(piece, str):
        if (m := _BYTE_FALLBACK.fullmatch(piece)) is not None:
            return bytes([int(m.group(1), 16)])
        if piece and all(c in _BYTE_ALPHABET for c in piece):
            return bytes(_BYTE_ALPHABET[c] for c in piece)
    return text.encode()   # a vocabulary of neither kind: its own U+FFFD, as decoded


def completion_events(body: dict[str, Any], *, include_usage: bool) -> list[str]:
    """``body`` as the Server-Sent Events of a stream: ``chat.completion.chunk`` objects, then ``[DONE]``."""
    [choice] = body["choices"]
    message = choice["message"]
    head = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"],
            **({"usage": None} if include_usage else {})}

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": message["content"]}, logprobs=choice["logprobs"])]
    if message.get("tool_calls"):
        chunks.append(chunk({"tool_calls": [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": body["usage"]})
    return [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]

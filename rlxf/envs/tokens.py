"""Token-in, token-out conversations: one token sequence per episode, built by appending.

    conv = Conversation.start(tokenizer, [{"role": "user", "content": "Guess a number"}])
    conv.ids                                   # the prompt ids (chat template, generation prompt)
    conv.add_model_turn(completion_ids, logprobs, versions)  # the engine's ids, never re-tokenized
    conv.add_messages([{"role": "user", "content": "higher"}])  # template text between the turns

The model's ids are kept as sampled. What the environment says is appended as the *difference*
between two renderings of the chat template: the conversation so far and the conversation with
the new messages (plus the next generation prompt). That is only sound when the template is
append-only: rendering more messages must leave the earlier text unchanged. Each append checks
this on the text (a template that rewrites earlier turns, e.g. one that drops reasoning from past
assistant turns, raises ``TemplateAppendError``: a configuration problem) and checks that the
appended text starts at a token boundary (``TokenBoundaryError``, ending only that episode), so
the ids equal a fresh templating of the whole conversation whenever the model's own ids are the
tokenizer's canonical ids of its text.

Messages reach the template as they are given (a tool message with its ``tool_call_id`` and
``name``, which templates that render tool results read; ``rlxf.envs.tools``). The model's turns
are recorded as ``{"role": "assistant", "content": TEXT}``, never with OpenAI ``tool_calls``: a
template given ``tool_calls`` writes the calls in its own layout (Qwen2.5 and Hermes as
``<tool_call>`` JSON on lines of their own after the content, Llama 3.1 in place of the content),
which is not what the model sampled, while the calls are already in TEXT as the model wrote them.
Templated as text, the turn renders as its sampled text, which every append checks. TEXT is the
turn's ids decoded without the tokenizer's control tokens (eos, the template's markers), its
tool-call markers (``<tool_call>``...) kept where a tokenizer flags them special (``reply_text``).

Only the model's sampled ids are a model turn (loss_mask 1), so nothing else may read as one: an
environment's or a program's message holding the text of a special token the chat template writes
around turns, or of eos, which the tokenizer turns into the token itself
(``<|im_end|>\\n<|im_start|>assistant\\n...`` in a tool's output), is refused (``ControlTextError``:
the agent loop ends that episode, the chat endpoint answers 400), as a role other than
``rlxf.envs.base.ENV_ROLES`` is. The text of any other special token (the ``<s>`` and ``</s>`` of
HTML, where a ChatML fine-tune of Mistral keeps them special; Llama 3's reserved tokens) stays text:
``Conversation.render`` marks it in the messages and tools and ``encode_rendered`` encodes it as
text, as transformers' ``apply_chat_template(..., sanitize_control_tokens=True)`` does.

Tools (OpenAI function schemas, ``Conversation.start(..., tools=...)``) belong to the whole
conversation and are rendered into every templating of it: given to the template as
``apply_chat_template(messages, tools=...)`` when it renders them (Qwen2.5, Llama 3.1, Hermes...),
or, for a template that ignores them, written into the system message as the built-in tool
environments write them (``rlxf.envs.tools.with_tools_described``), so the model sees them either way.
"""

from __future__ import annotations

import math
import numbers
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

from rlxf.envs.base import Message
from rlxf.envs.tools import with_tools_described
from rlxf.models.tokenizer import TOOL_CALL_MARKERS, control_tokens, reply_text


class TemplateAppendError(ValueError):
    """The chat template re-renders earlier turns, so a conversation cannot be extended by appending."""


class TokenBoundaryError(ValueError):
    """The text appended after a model turn merges with the model's last tokens."""


class ControlTextError(ValueError):
    """A message to template holds the text of a control token, which tokenizes as the token itself."""


class TokenLimitError(ValueError):
    """The messages to append would make the conversation longer than allowed; nothing was appended."""

    def __init__(self, message: str, length: int):
        super().__init__(message)
        self.length = length   # tokens the conversation would have had


def render(tokenizer, messages: list[Message], *, generation_prompt: bool,
           tools: list[dict[str, Any]] | None = None) -> str:
    """The chat template's text of ``messages``; ``tools`` go to the template as they are."""
    extra = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **extra)


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be tokenized, or None: a lone surrogate (``"\\ud800"``, half of a
    UTF-16 pair, what a bad decode leaves) is not Unicode text, and tokenizers refuse it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"is not valid Unicode: it holds the lone surrogate {text[e.start]!r} at character {e.start}; "
                f"decode bytes with errors='replace' (or drop the character)")
    return None


_LONGEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def longest_token(tokenizer) -> int:
    """The most characters one token of ``tokenizer`` stands for (its longest vocabulary entry), so
    text of n characters is at least n / longest_token tokens: an observation far past a limit is
    refused before it is tokenized (megabytes of tool output take seconds to tokenize)."""
    longest = _LONGEST.get(tokenizer)
    if longest is None:
        longest = _LONGEST[tokenizer] = max(map(len, tokenizer.get_vocab()), default=1)
    return longest


# Conversations a chat template renders with its turn markers (one may refuse a system prompt, as
# Gemma's does, or a tool message)
_PROBES = (
    [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
     {"role": "user", "content": "v"}],
    [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}],
    [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
     {"role": "tool", "tool_call_id": "call_0_0", "name": "f", "content": "t"}],
)

# Private-use characters around a special token's text in a message, so that its encoding tells it
# from the template's own special tokens (transformers' ``mark_control_tokens`` uses the same two)
_OPEN, _CLOSE = "\U000f0000", "\U000f0001"


@dataclass(frozen=True)
class SpecialTexts:
    """Regexes of the texts of a tokenizer's control tokens, as a message may hold them."""

    turn: re.Pattern | None      # the chat template's markers and eos: refused, they would make a model turn
    literal: re.Pattern | None   # the others: they stay text
    marked: re.Pattern | None    # a literal between _OPEN and _CLOSE (``Conversation.render``)


_SPECIAL_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def special_texts(tokenizer) -> SpecialTexts:
    """The texts of ``tokenizer``'s control tokens (``control_tokens``, a blank one left out) that
    are the chat template's: those it writes when rendering ``_PROBES``, and eos; all of them where
    no probe renders, or where the tokenizer has no fast backend (``_plain_ids`` needs one).

    Read once per tokenizer and again when it gains tokens or another template or eos."""
    key = (len(tokenizer), tokenizer.eos_token_id, getattr(tokenizer, "chat_template", None))
    cached = _SPECIAL_TEXTS.get(tokenizer)
    if cached is None or cached[0] != key:
        control = {i: text for i, text in control_tokens(tokenizer).items() if text.strip()}
        # added tokens not flagged special that the template writes around turns are markers too
        # (DeepSeek-R1's "<｜Assistant｜>"): in a message they would be the token itself
        added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()
                 if not t.special and t.content.strip() and t.content not in TOOL_CALL_MARKERS}
        written, rendered = {tokenizer.eos_token_id}, False
        for probe in _PROBES if hasattr(tokenizer, "backend_tokenizer") else ():
            try:
                written.update(encode_text(tokenizer, render(tokenizer, probe, generation_prompt=True)))
                rendered = True
            except Exception:  # noqa: BLE001 - a template refusing this probe's roles
                continue
        turn = {text for i, text in control.items() if i in written or not rendered}
        literal = _any_of(set(control.values()) - turn)
        turn |= {text for i, text in added.items() if i in written}
        marked = re.compile(f"{_OPEN}({literal.pattern}){_CLOSE}") if literal else None
        cached = _SPECIAL_TEXTS[tokenizer] = key, SpecialTexts(_any_of(turn), literal, marked)
    return cached[1]


def _any_of(texts: set[str]) -> re.Pattern | None:
    """A regex matching any of ``texts``, the longest first (``</s>`` before ``<``...)."""
    return re.compile("|".join(map(re.escape, sorted(texts, key=len, reverse=True)))) if texts else None


def _marked(value: Any, literal: re.Pattern | None) -> Any:
    """``value`` (messages, tools) with the special tokens' texts in its strings between ``_OPEN`` and
    ``_CLOSE``, so that ``encode_rendered`` encodes them as text."""
    if literal is None:
        return value
    if isinstance(value, str):
        return literal.sub(f"{_OPEN}\\g<0>{_CLOSE}", value)
    if isinstance(value, dict):
        return {key: _marked(v, literal) for key, v in value.items()}
    if isinstance(value, list):
        return [_marked(v, literal) for v in value]
    return value


def check_no_control_text(tokenizer, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> None:
    """Refuse messages holding the text of a special token the chat template writes around turns
    (``<|im_end|>``, ``<|start_header_id|>``) or of eos (``special_texts``): the tokenizer reads it
    as the token itself, so an environment, a tool's output or a program could end its turn and
    start one of the model's (``<|im_end|>\\n<|im_start|>assistant\\n...``) that the model never
    sampled, whatever the message's role. Other special tokens' texts stay text (``encode_rendered``).
    Every string inside a message (content parts, tool calls) is read, and so are ``tools``, which
    the template renders into the prompt."""
    turn = special_texts(tokenizer).turn
    if turn is None:
        return
    fields = [(f"a {m.get('role')!r} message's {key}", value) for m in messages for key, value in m.items()]
    for where, value in [*fields, *((f"tools[{i}]", t) for i, t in enumerate(tools or []))]:
        for text in _strings(value):
            found = turn.search(text)
            if found is not None:
                at = found.start()
                raise ControlTextError(
                    f"{where} holds {found[0]!r} ({text[max(0, at - 20):at + 40]!r}), "
                    f"the text of a special token the chat template writes around turns (or of eos): templated, "
                    f"it would be that token (ending the turn, or starting one the model never wrote), not text; "
                    f"remove it or break it up (e.g. '< |' for '<|') in what the environment, tool or program sends")


def _strings(value: Any):
    """Every string in ``value`` (and in the lists and dicts inside it, keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def encode_text(tokenizer, text: str) -> list[int]:
    problem = text_problem(text)
    if problem is not None:
        raise ValueError(f"the text to tokenize {problem}")
    # the chat template writes its own special tokens: the tokenizer must add none
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_rendered(tokenizer, text: str) -> list[int]:
    """The ids of a conversation's template text (``Conversation.render``): ``encode_text``'s, but
    a special token's text that a message holds (marked) is encoded as text, without its marks; it
    and the text after it are encoded apart from what precedes them, as the token would be."""
    marked = special_texts(tokenizer).marked
    pieces = [text] if marked is None else marked.split(text)   # text, literal, text, ..., text
    # a mark left alone (a template that split marked content, as on "</think>") is no text of anyone's
    pieces = [p if k % 2 else p.replace(_OPEN, "").replace(_CLOSE, "") for k, p in enumerate(pieces)]
    ids = encode_text(tokenizer, pieces[0])
    newline = encode_text(tokenizer, "\n") if len(pieces) > 1 else []
    for k, piece in enumerate(pieces[1:], start=1):
        encode = _plain_ids if k % 2 else encode_text
        # after a newline, which is then dropped: a SentencePiece tokenizer would start the piece
        # with a word-start "▁" (transformers' sanitize_control_tokens does the same)
        piece_ids = encode(tokenizer, "\n" + piece)
        piece_ids = piece_ids[len(newline):] if piece_ids[:len(newline)] == newline else encode(tokenizer, piece)
        if k % 2 and tokenizer.convert_tokens_to_ids(piece) in piece_ids:
            raise ControlTextError(f"a message holds {piece!r}, the text of a special token that this tokenizer "
                                   f"encodes as the token even as plain text, so it cannot stay text; remove it or "
                                   f"break it up in what the environment, tool or program sends")
        ids += piece_ids
    return ids


def _plain_ids(tokenizer, text: str) -> list[int]:
    """``text``'s ids as plain text: the tokenizer's pipeline without its added tokens. Not through
    ``split_special_tokens``, which switches the tokenizer's backend for every thread using it."""
    backend = tokenizer.backend_tokenizer
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    words = [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(text)] if backend.pre_tokenizer else [text]
    return [token.id for word in words for token in backend.model.tokenize(word)]


@dataclass
class Conversation:
    """The messages of one episode and its token sequence, with per-token provenance.

    ``ids[:prompt_len]`` are the first observation's prompt (``messages[:prompt_messages]``, which
    may hold few-shot assistant messages: template tokens like the rest); after it every token is
    either the model's (``loss_mask`` 1, its engine log-prob and the policy version that sampled
    it) or the template's / the environment's (``loss_mask`` 0, log-prob 0, version -1: a consumer
    of versions, such as a staleness bound, reads them where ``loss_mask`` is 1).
    """

    tokenizer: Any
    messages: list[Message]
    ids: list[int]
    prompt_len: int
    prompt_messages: int = 0                                # messages of the first observation
    loss_mask: list[int] = field(default_factory=list)      # (R,) over ids[prompt_len:]
    logprobs: list[float] = field(default_factory=list)     # (R,)
    versions: list[int] = field(default_factory=list)       # (R,)
    turn_ends: list[int] = field(default_factory=list)      # response index of each model turn's last token
    tools: list[dict[str, Any]] | None = None              # OpenAI function schemas the model is shown
    tools_in_system: bool = False                           # the template ignores ``tools``: they are in the system message
    _rendered: str = ""                                     # the template text ``ids`` stand for (canonically)
    _stop_texts: tuple[str, ...] = ()                        # text of tokens that may end a model turn

    @classmethod
    def start(cls, tokenizer, messages: list[Message], *, tools: list[dict[str, Any]] | None = None) -> Conversation:
        if getattr(tokenizer, "chat_template", None) is None:
            raise TemplateAppendError("multi-turn episodes need a chat template; the tokenizer has none "
                                      "(set model.chat_template)")
        check_no_control_text(tokenizer, messages, tools)
        tools = [dict(t) for t in tools] if tools else None
        text = render(tokenizer, messages, generation_prompt=True, tools=tools)
        # a template that ignores `tools` renders the same text without them
        in_system = tools is not None and text == render(tokenizer, messages, generation_prompt=True)
        conv = cls(tokenizer=tokenizer, messages=[dict(m) for m in messages], ids=[], prompt_len=0,
                   prompt_messages=len(messages), tools=tools, tools_in_system=in_system)
        text = conv.render(conv.messages, generation_prompt=True)
        conv.ids = encode_rendered(tokenizer, text)
        conv.prompt_len, conv._rendered = len(conv.ids), text
        return conv

    @classmethod
    def from_prompt(cls, tokenizer, prompt_ids: list[int], prompt_text: str) -> Conversation:
        """Start from a data prompt's own ids (an environment whose first observation is empty):
        the model's turns append as usual, but environment messages cannot (their messages are unknown)."""
        return cls(tokenizer=tokenizer, messages=[], ids=list(prompt_ids), prompt_len=len(prompt_ids),
                   _rendered=prompt_text)

    @property
    def response_ids(self) -> list[int]:
        return self.ids[self.prompt_len:]

    @property
    def model_turns(self) -> int:
        """The model turns so far (a first observation's few-shot assistant messages are not).

        The one count of ``env.max_turns`` and of ``episode["turns"]``, in the agent loop and at the
        chat endpoint alike: every turn the engine sampled counts, one without text, tool call or
        even a token included (``turn_ends`` lists only turns that hold tokens)."""
        return sum(m["role"] == "assistant" for m in self.messages[self.prompt_messages:])

    def render(self, messages: list[Message], *, generation_prompt: bool) -> str:
        """The template text of ``messages`` in this conversation, its tools included, the special
        tokens' texts they hold marked (``encode_rendered`` encodes them as text)."""
        literal = special_texts(self.tokenizer).literal
        if self.tools_in_system:
            messages = with_tools_described(messages, self.tools)
            return render(self.tokenizer, _marked(messages, literal), generation_prompt=generation_prompt)
        return render(self.tokenizer, _marked(messages, literal), generation_prompt=generation_prompt,
                      tools=_marked(self.tools, literal))

    def add_model_turn(self, token_ids: list[int], logprobs: list[float], version: int | list[int], *,
                       stopped: bool = True) -> str:
        """Append the engine's ids as they are; returns the turn's text (control tokens removed,
        ``reply_text``).

        ``version``: the policy version of each token (``Completion.versions()``: the weights may
        change while one turn is decoded), or one version for the whole turn.
        ``stopped``: the turn ended on a stop token (the engine's ``finish_reason == "stop"``); its
        last token then stands for the template's end-of-turn text where the two agree."""
        if len(token_ids) != len(logprobs):
            raise ValueError(f"model turn: {len(token_ids)} ids but {len(logprobs)} log-probs")
        versions = [version] * len(token_ids) if isinstance(version, numbers.Integral) else list(version)
        if len(versions) != len(token_ids):
            raise ValueError(f"model turn: {len(token_ids)} ids but {len(versions)} policy versions")
        text = reply_text(self.tokenizer, token_ids)
        self.ids += list(token_ids)
        self.loss_mask += [1] * len(token_ids)
        self.logprobs += [float(x) for x in logprobs]
        self.versions += [int(v) for v in versions]
        if token_ids:
            self.turn_ends.append(len(self.loss_mask) - 1)
        self.messages.append({"role": "assistant", "content": text})
        last = control_tokens(self.tokenizer).get(token_ids[-1]) if token_ids else None
        self._stop_texts = (last,) if last and stopped else ()
        return text

    def add_messages(self, new: list[Message], *, generation_prompt: bool = True,
                     max_len: int | None = None) -> list[int]:
        """Append the environment's messages after the last model turn (and the generation prompt
        of the next one); returns the appended ids (loss_mask 0).

        ``max_len``: the longest the conversation may become; messages that would make it longer
        raise ``TokenLimitError`` and leave the conversation as it was."""
        assert self.messages and self.messages[-1]["role"] == "assistant", "add_messages follows a model turn"
        if len(self.messages) == 1:
            raise TokenBoundaryError("this episode started from the data prompt's own ids (the environment's "
                                     "first observation was empty), so messages cannot be appended to it; "
                                     "return the first observation as chat messages from reset()")
        reply = _marked(self.messages[-1]["content"], special_texts(self.tokenizer).literal)
        closed = self.render(self.messages, generation_prompt=False)
        full = self.render(self.messages + [dict(m) for m in new], generation_prompt=generation_prompt)
        name = getattr(self.tokenizer, "name_or_path", "") or "the tokenizer's"
        if not closed.startswith(self._rendered) or not full.startswith(closed):
            raise TemplateAppendError(
                f"chat template of {name!r} is not append-only: rendering the conversation with one more "
                f"message changes the text of earlier turns (e.g. it drops past reasoning, or moves the system "
                f"prompt), so multi-turn token ids cannot be built by appending; set model.chat_template to a "
                f"template whose rendering of a longer conversation starts with that of a shorter one")
        turn = closed[len(self._rendered):]
        if not turn.startswith(reply):
            raise TemplateAppendError(
                f"chat template of {name!r} changes the assistant's text when rendering it (expected the turn "
                f"to start with the model's reply {reply[:40]!r}, got {turn[:40]!r}); token-in/token-out needs "
                f"templates that write assistant content verbatim")
        closing = turn[len(reply):]
        # The model ended its turn with the template's own end token: it stands for that text. Any
        # other stop token (another eos id) stays as sampled, and the template's closing follows it
        # (mask 0): the ids then hold one token a fresh templating would not, never a re-tokenization.
        for stop in self._stop_texts:
            if closing.startswith(stop):
                closing = closing[len(stop):]
                break
        appended = closing + full[len(closed):]
        chars = len(appended) - appended.count(_OPEN) - appended.count(_CLOSE)   # marks are no text
        if max_len is not None and chars > (max_len - len(self.ids)) * longest_token(self.tokenizer):
            least = math.ceil(chars / longest_token(self.tokenizer))
            raise TokenLimitError(f"the messages add {chars} characters, at least {least} tokens, to the "
                                  f"conversation's {len(self.ids)}, past its limit of {max_len}", len(self.ids) + least)
        check_no_control_text(self.tokenizer, new)
        new_ids = encode_rendered(self.tokenizer, appended)
        if max_len is not None and len(self.ids) + len(new_ids) > max_len:
            raise TokenLimitError(f"the messages add {len(new_ids)} tokens to the conversation's {len(self.ids)}, "
                                  f"past its limit of {max_len}", len(self.ids) + len(new_ids))
        # the appended text must start at a token boundary of the whole conversation
        whole = encode_rendered(self.tokenizer, full)
        if new_ids and whole[len(whole) - len(new_ids):] != new_ids:
            raise TokenBoundaryError(
                f"the text the template appends after the model's turn ({appended[:30]!r}) merges with the "
                f"model's last tokens when the conversation is tokenized whole; the episode's ids would "
                f"differ from a fresh templating")
        self.messages += [dict(m) for m in new]
        self.ids += new_ids
        self.loss_mask += [0] * len(new_ids)
        self.logprobs += [0.0] * len(new_ids)
        self.versions += [-1] * len(new_ids)
        self._rendered = full
        return new_ids

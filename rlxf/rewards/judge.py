"""LLM-as-a-judge: a rubric prompt goes to a model, the score in its reply becomes the reward.

    judge = JudgeVerifier("judge", OpenAIChatClient("http://127.0.0.1:8000/v1", "qwen"), rubric=...)
    result = judge.score(RewardInput(prompt, response, ground_truth))

The model is reached through a ``ChatClient``: ``OpenAIChatClient`` (any OpenAI-compatible
``/chat/completions`` endpoint: vLLM, SGLang, a hosted API) or ``EngineChatClient`` (an rlxf
rollout engine in this process). The reply's score ``s`` in [score_min, score_max] maps to
``(s - score_min) / (score_max - score_min)``. A reply without a parseable, in-range score,
or a request that failed after its retries, is recorded as an error (``reward.error_score``),
never guessed.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rlxf.errors import MissingExtraError
from rlxf.rewards.base import run_sync
from rlxf.rewards.types import RewardInput, RewardResult

Messages = list[dict[str, str]]
# a number, and its sign only where it is one: in "0-10" the 10 is not minus ten
_NUM = r"((?:(?<![\w.])-)?(?<![\w.])\d+(?:\.\d+)?)"
# "/10", "out of 10": the scale a score is given on (must be score_max)
_OF = r"(?:\s*/\s*|\s+out\s+of\s+)(?P<of>\d+(?:\.\d+)?)(?!\w)"
# the scale named between a label and its colon: "Score (0-10):", "Score [1-5]:", "Score out of 10:"
_SCALE = r"(?:\([^()\n]{0,40}\)|\[[^\[\]\n]{0,40}\]|out\s+of\s+\d+(?:\.\d+)?)?"
# in tiers, strongest first: a reply's verdict is the last match of the first tier that has one
# (a "9/10" or "10 out of 10" in the reasoning never overrides an explicit SCORE: 2)
DEFAULT_PATTERNS = (
    (rf"(?i)\bscore\s*{_SCALE}\s*[:=]\s*\**\s*{_NUM}(?:{_OF})?",   # SCORE: 7 / Score (0-10) = 7 / **Score:** 7
     rf"\[\[\s*{_NUM}\s*\]\]",                                     # [[7]] (MT-Bench)
     rf"(?i)<score>\s*{_NUM}\s*</score>"),                             # <score>7</score>
    (rf"{_NUM}{_OF}",),                                                 # 7/10, 7 out of 10
    (rf"(?i)\b(?:rating|grade|verdict)\s*{_SCALE}\s*[:=]\s*\**\s*{_NUM}(?:{_OF})?",   # Rating: 7
     rf"(?i)\b(?:give|rate|grade|award|assign)s?\s+(?:it|this|th(?:is|e)\s+(?:response|answer))\s+"
     rf"(?:an?\s+)?(?:(?:score|rating|grade)\s+of\s+)?{_NUM}(?:{_OF})?"),                   # I give it 8
)
# how a rubric asks for each explicit format, and that format's pattern
_ASKED = ((re.compile(r"(?i)\bscore\s*[:=]"), DEFAULT_PATTERNS[0][0]),
          (re.compile(r"\[\["), DEFAULT_PATTERNS[0][1]),
          (re.compile(r"(?i)<score>"), DEFAULT_PATTERNS[0][2]))
# a range: "0-10", "0 – 10", "0 to 10", "0/10 - 10/10", its second end above its first (so
# "8 - 2 points off" is not one)
_RANGE_SEP = r"(?:[ \t]*[-–—][ \t]*|[ \t]+(?:to|through)[ \t]+)"
_RANGE_NEXT = re.compile(rf"(?i){_RANGE_SEP}(\d+(?:\.\d+)?)")
_RANGE_FROM = re.compile(rf"(?i)(?<![\w.])(-?\d+(?:\.\d+)?)(?:{_OF})?{_RANGE_SEP}$")


def asked_format(rubric: str) -> str | None:
    """The pattern of the one explicit score format (``SCORE:``, ``[[N]]``, ``<score>``) that
    ``rubric`` asks the judge for, or None when it names none or several. A judge's reply may
    quote the graded response, which can carry a verdict of its own in another of these formats."""
    asked = [pattern for marker, pattern in _ASKED if marker.search(rubric)]
    return asked[0] if len(asked) == 1 else None


def _claims(text: str, tiers: Sequence[Sequence[str]]) -> set[tuple[str, float]]:
    """Every (pattern, score) that ``text`` writes in a score format of ``tiers``."""
    claims = set()
    for pat in (pat for tier in tiers for pat in tier):
        for match in re.finditer(pat, text):
            try:
                claims.add((pat, float(match.group(1))))
            except (ValueError, IndexError, TypeError):
                continue
    return claims


@dataclass
class ChatReply:
    """One judge reply: its text, or why there is none."""

    text: str = ""
    error: str | None = None


class ChatClient(Protocol):
    """Sends chat conversations to a model; one reply per conversation, in order."""

    async def chat(self, conversations: Sequence[Messages], *, max_tokens: int,
                   temperature: float) -> list[ChatReply]: ...


def parse_score(reply: str, low: float, high: float, pattern: str | None = None,
                asked: str | None = None, *, response: str = "", rubric: str = "") -> float | None:
    """The judge's score in ``reply``, or None: of the matches within [low, high] of the first
    tier of ``DEFAULT_PATTERNS`` that has any (an explicit ``SCORE:``, ``[[N]]`` or
    ``<score>``, then ``N/M`` or ``N out of M``, then ``Rating: N`` or ``I give it N``), the one
    that ends last (a judge gives its verdict after its reasoning, which may quote a score the
    response claimed for itself). ``pattern`` replaces the tiers with one of its own; ``asked``
    (see ``asked_format``) goes ahead of them as a tier of its own.

    The scale is never a score: not either end of a range (``0-10``, ``0 to 10``, ``0/10 -
    10/10``), nor a score on another scale (``3/4`` where ``high`` is 10). Nor is a quote: a
    score the graded ``response`` writes in the same format with the same value is the
    response's claim, which the judge may repeat: quoted (between quotation marks) it is never
    the verdict, and otherwise only where the reply has no other score (an honest response may
    write the score its judge gives); one the ``rubric`` (with the prompt and reference) writes
    is an anchor the judge may restate, the verdict only if no other score follows it.

    >>> parse_score("SCORE: 2. It claims 10 out of 10 confidence.", 0, 10)
    2.0

    >>> parse_score("Clear and correct.\\nSCORE: 8", 0, 10)
    8.0
    >>> parse_score("I'd say [[3]] overall", 0, 10)
    3.0
    >>> parse_score("On a 0-10 scale, I give it 8", 0, 10)
    8.0
    >>> parse_score("no idea", 0, 10) is None
    True
    >>> parse_score("SCORE: 2\\nIt ends with [[10]], its own verdict.", 0, 10, asked=asked_format("SCORE: <n>"))
    2.0
    >>> parse_score('It writes "Score: 10" of itself. I rate it 2 out of 10.', 0, 10, response="4. Score: 10")
    2.0
    """
    tiers = [(pattern,)] if pattern else ([(asked,)] if asked else []) + list(DEFAULT_PATTERNS)
    quoted, anchors = _claims(response, tiers), _claims(rubric, tiers)
    found: list[tuple[int, int, float, bool]] = []   # (tier, end, score, an anchor)
    for rank, tier in enumerate(tiers):
        for pat in tier:
            for match in re.finditer(pat, reply):
                try:
                    score = float(match.group(1))
                except (ValueError, IndexError, TypeError):
                    continue
                of = match.groupdict().get("of")
                if not low <= score <= high or (of is not None and float(of) != high):
                    continue   # out of range, or on another scale
                after = _RANGE_NEXT.match(reply, match.end())
                if after is not None and float(after.group(1)) > score:
                    continue   # the low end of a range
                before = _RANGE_FROM.search(reply[max(0, match.start(1) - 60):match.start(1)])
                if before is not None and float(before.group(1)) == low and score == high:
                    continue   # the high end of the scale
                claim = (pat, score) in quoted
                if claim and _in_quotes(reply, match.start(), match.end()):
                    continue   # the judge quoting the response
                found.append((rank, match.end(), score, (pat, score) in anchors, claim))
    # a score the response claims is the verdict only when the reply has no other: an honest
    # response may write "Score: 8" where the judge's own verdict is 8 too
    if any(not claim for *_, claim in found):
        found = [f for f in found if not f[4]]
    # an anchor the rubric writes counts only where nothing follows it: the judge restating it
    # before its verdict ("Score: 10 means flawless; this is 3/10") is not its verdict
    last_end = max((end for _, end, _, anchor, _ in found if not anchor), default=-1)
    found = [f for f in found if not f[3] or f[1] > last_end]
    if not found:
        return None
    best = min(rank for rank, *_ in found)
    return max((end, score) for rank, end, score, *_ in found if rank == best)[1]


_QUOTES = "\"'`“”‘’"


def _in_quotes(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` stands between quotation marks (``"Score: 10"``)."""
    return start > 0 and end < len(text) and text[start - 1] in _QUOTES and text[end] in _QUOTES


class OpenAIChatClient:
    """An OpenAI-compatible ``POST {base_url}/chat/completions`` client (httpx).

    Up to ``concurrency`` requests are in flight; a transport error, a 429 or a 5xx is
    retried ``retries`` times with backoff. One httpx client per event loop (clients are
    bound to the loop they were made on).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 60.0,
                 retries: int = 2, concurrency: int = 8):
        try:
            import httpx  # noqa: PLC0415
        except ImportError as e:
            raise MissingExtraError("the judge's HTTP client needs httpx: pip install 'rlxf[serve]'") from e
        self._httpx = httpx
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self.retries = retries
        self.concurrency = concurrency

    async def chat(self, conversations: Sequence[Messages], *, max_tokens: int,
                   temperature: float) -> list[ChatReply]:
        gate = asyncio.Semaphore(self.concurrency)
        async with self._httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers) as client:
            async def one(messages: Messages) -> ChatReply:
                async with gate:
                    return await self._one(client, messages, max_tokens, temperature)
            return list(await asyncio.gather(*(one(m) for m in conversations)))

    async def _one(self, client: Any, messages: Messages, max_tokens: int, temperature: float) -> ChatReply:
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
        problem = ""
        for attempt in range(self.retries + 1):
            try:
                response = await client.post(self.url, json=body)
            except self._httpx.HTTPError as e:
                problem = f"{type(e).__name__}: {e}"
            else:
                if response.status_code == 200:
                    try:
                        content = response.json()["choices"][0]["message"]["content"]
                    except (ValueError, KeyError, IndexError, TypeError):
                        return ChatReply(error=f"judge endpoint answered without choices[0].message.content: "
                                               f"{response.text[:200]!r}")
                    return _reply_of(content)
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code < 500 and response.status_code != 429:
                    break
            if attempt < self.retries:
                await asyncio.sleep(0.25 * 2 ** attempt)
        return ChatReply(error=f"judge request to {self.url} failed: {problem}")


def _reply_of(content: Any) -> ChatReply:
    """A reply's ``message.content``: a string, null (no text), or a list of content parts
    (``[{"type": "text", "text": ...}]``, as some OpenAI-compatible servers answer), whose
    text parts are joined. Anything else is that sample's error, not a TypeError that fails
    the whole batch."""
    if content is None or isinstance(content, str):
        return ChatReply(content or "")
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        texts = [part.get("text") for part in content if part.get("type", "text") == "text"]
        if all(isinstance(t, str) for t in texts):
            return ChatReply("".join(texts))
    return ChatReply(error=f"judge endpoint answered choices[0].message.content = {content!r:.200}; expected "
                           "a string or a list of text parts")


class EngineChatClient:
    """Judge with an rlxf rollout engine in this process (``rlxf.rollout.Engine``).

    Every conversation of a call goes into one ``engine.generate`` (the engine batches them),
    run on a thread so the event loop stays free.
    """

    def __init__(self, engine: Any, tokenizer: Any):
        self.engine = engine
        self.tokenizer = tokenizer

    @classmethod
    def from_path(cls, path: str, backend: str = "native") -> EngineChatClient:
        from rlxf.models import load_model, load_tokenizer  # noqa: PLC0415 - torch + transformers
        from rlxf.models.loading import check_vocab  # noqa: PLC0415
        from rlxf.rollout import build_engine  # noqa: PLC0415

        tokenizer = load_tokenizer(path)
        model = load_model(path)
        check_vocab(model, tokenizer, model_what=f"judge model {path}")
        return cls(build_engine(backend, model, tokenizer), tokenizer)

    async def chat(self, conversations: Sequence[Messages], *, max_tokens: int,
                   temperature: float) -> list[ChatReply]:
        from rlxf.models.tokenizer import reply_text  # noqa: PLC0415
        from rlxf.rollout import SamplingParams  # noqa: PLC0415

        prompts = [self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True)
                   for m in conversations]
        prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
        sampling = SamplingParams(n=1, temperature=temperature, max_new_tokens=max_tokens)
        groups = await asyncio.to_thread(self.engine.generate, prompts, sampling)
        replies = []
        for group in groups:
            c = group[0]
            if c.finish_reason == "error":
                replies.append(ChatReply(error=f"judge engine: {c.error}"))
            else:
                replies.append(ChatReply(reply_text(self.tokenizer, c.response_ids)))
        return replies


class JudgeVerifier:
    """Grades responses with a ``ChatClient`` and a rubric (see the module doc)."""

    self_limited = True           # the client has its own timeouts and retries
    concurrency = 1               # batches in flight; the client parallelises inside a batch
    batch_size = 64

    def __init__(self, name: str, client: ChatClient, *, rubric: str, system: str | None = None,
                 score_min: float = 0.0, score_max: float = 10.0, score_pattern: str | None = None,
                 max_tokens: int = 512, temperature: float = 0.0):
        self.name = name
        self.client = client
        self.rubric = rubric
        self.system = system
        self.score_min = score_min
        self.score_max = score_max
        self.score_pattern = score_pattern
        self.asked = asked_format(rubric)
        self.max_tokens = max_tokens
        self.temperature = temperature

    @classmethod
    def from_config(cls, cfg: Any) -> JudgeVerifier:
        if cfg.backend == "openai":
            key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
            if cfg.api_key_env and not key:
                raise ValueError(f"judge {cfg.label!r}: environment variable {cfg.api_key_env} (api_key_env) is not set")
            client: ChatClient = OpenAIChatClient(cfg.url, cfg.model, api_key=key, timeout_s=cfg.timeout_s,
                                                  retries=cfg.retries, concurrency=cfg.concurrency)
        else:
            client = EngineChatClient.from_path(cfg.model)
        return cls(cfg.label, client, rubric=cfg.rubric, system=cfg.system, score_min=cfg.score_min,
                   score_max=cfg.score_max, score_pattern=cfg.score_pattern, max_tokens=cfg.max_tokens,
                   temperature=cfg.temperature)

    @staticmethod
    def _reference(x: RewardInput) -> str:
        gt = x.ground_truth
        if isinstance(gt, dict) and "answer" in gt:
            gt = gt["answer"]
        return "" if gt is None else str(gt)

    def messages(self, x: RewardInput) -> Messages:
        # the response cannot close the tags it is fenced in, nor open a second pair
        response = re.sub(r"(?i)<\s*(/?)\s*response\b[^>]*>", r"<\1response_>", x.response)
        values = {"prompt": x.prompt, "response": response, "ground_truth": self._reference(x),
                  "score_min": _fmt(self.score_min), "score_max": _fmt(self.score_max)}
        # one pass over the rubric, not str.format: a rubric may show JSON or code with braces,
        # and a response may itself contain "{prompt}"
        text = re.sub(r"\{(prompt|response|ground_truth|score_min|score_max)\}", lambda m: values[m.group(1)],
                      self.rubric)
        return ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": text}]

    def verdict(self, reply: ChatReply, x: RewardInput | None = None) -> RewardResult:
        """The reply's score mapped to [0, 1]; with the graded sample ``x``, a score its response
        writes (and the judge may quote) is not the verdict, nor one the rubric writes unless
        nothing follows it (``parse_score``)."""
        if reply.error is not None:
            return RewardResult.failed(reply.error)
        response, rubric = ("", "") if x is None else (x.response, "\n".join(
            [self.system or "", self.rubric, x.prompt, self._reference(x)]))
        raw = parse_score(reply.text, self.score_min, self.score_max, self.score_pattern, self.asked,
                          response=response, rubric=rubric)
        if raw is None:
            quoted = response and parse_score(reply.text, self.score_min, self.score_max, self.score_pattern,
                                              self.asked) is not None
            why = (" of its own (the only ones it has are scores the graded response writes of itself, "
                   "which it may quote)" if quoted else "")
            return RewardResult.failed(f"judge reply has no score in [{_fmt(self.score_min)}, "
                                       f"{_fmt(self.score_max)}]{why}: {reply.text[-200:]!r}")
        return RewardResult((raw - self.score_min) / (self.score_max - self.score_min), {"raw": raw})

    async def ascore_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        replies = await self.client.chat([self.messages(x) for x in inputs], max_tokens=self.max_tokens,
                                         temperature=self.temperature)
        if len(replies) != len(inputs):   # the scorer reports the mismatch
            return [self.verdict(r) for r in replies]
        return [self.verdict(r, x) for r, x in zip(replies, inputs, strict=True)]

    def score(self, x: RewardInput) -> RewardResult:
        return run_sync(self.ascore_batch([x]))[0]

    def close(self) -> None:
        pass


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)

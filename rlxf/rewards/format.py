"""Shape rewards: does the response follow the format, and is it too long.

    >>> v = FormatVerifier("format", required_tags=["think", "answer"])
    >>> v.score(RewardInput("", "<think>2+2</think> <answer>4</answer>")).score
    1.0
    >>> v.score(RewardInput("", "<answer>4</answer> <think>late</think>")).score
    0.0
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rlxf.rewards.base import SyncVerifier
from rlxf.rewards.types import RewardInput, RewardResult


class FormatVerifier(SyncVerifier):
    """1.0 if the response matches ``pattern`` and has each of ``required_tags`` exactly once,
    in order and not empty (``<think>...</think> ... <answer>...</answer>``); else 0.0."""

    def __init__(self, name: str, pattern: str | None = None, match: str = "search",
                 required_tags: Sequence[str] = ()):
        super().__init__(name)
        if pattern is None and not required_tags:
            raise ValueError(f"format verifier {name!r} needs a pattern or required_tags")
        try:
            self.pattern = re.compile(pattern, re.DOTALL) if pattern is not None else None
        except re.error as e:
            raise ValueError(f"format verifier {name!r}: pattern {pattern!r} is not a valid regex: {e}") from None
        self.full = match == "full"
        self.tags = list(required_tags)

    @classmethod
    def from_config(cls, cfg: Any) -> FormatVerifier:
        return cls(cfg.label, cfg.pattern, cfg.match, cfg.required_tags)

    def score(self, x: RewardInput) -> RewardResult:
        text = x.response
        ok = True
        if self.pattern is not None:
            found = self.pattern.fullmatch(text.strip()) if self.full else self.pattern.search(text)
            ok = found is not None
        end = 0
        for tag in self.tags:
            opens = [m.start() for m in re.finditer(f"<{re.escape(tag)}>", text)]
            closes = [m.start() for m in re.finditer(f"</{re.escape(tag)}>", text)]
            if (len(opens) != 1 or len(closes) != 1 or not (end <= opens[0] < closes[0])
                    or not text[opens[0] + len(tag) + 2:closes[0]].strip()):
                ok = False   # missing, repeated, out of order, or empty: "<answer></answer>" answers nothing
                break
            end = closes[0]
        return RewardResult(1.0 if ok else 0.0)


def soft_overlong_penalty(length: int, max_len: int, buffer_len: int, penalty: float = 1.0) -> float:
    """DAPO soft overlong penalty for one response: ``rlxf.algorithms.shaping`` on a scalar.

    0 while ``length <= max_len - buffer_len``, then linear down to ``-penalty`` at ``max_len``
    and beyond (Yu et al. 2025, eq. 13).
    """
    import torch  # noqa: PLC0415 - the one implementation lives with the algorithms

    from rlxf.algorithms.shaping import soft_overlong_penalty as batched  # noqa: PLC0415

    return float(batched(torch.tensor([float(length)]), max_len, buffer_len, penalty)[0])


class OverlongVerifier(SyncVerifier):
    """The DAPO soft overlong penalty as a verifier (a score <= 0; weight 1 adds it as is)."""

    def __init__(self, name: str, buffer_fraction: float = 0.25, penalty: float = 1.0,
                 max_tokens: int | None = None):
        super().__init__(name)
        self.buffer_fraction = buffer_fraction
        self.penalty = penalty
        self.max_tokens = max_tokens

    @classmethod
    def from_config(cls, cfg: Any) -> OverlongVerifier:
        return cls(cfg.label, cfg.buffer_fraction, cfg.penalty, cfg.max_tokens)

    def score(self, x: RewardInput) -> RewardResult:
        max_len = self.max_tokens or x.max_new_tokens
        if x.response_tokens is None or max_len is None:
            return RewardResult.failed(
                "the overlong penalty needs the response length in tokens and max_new_tokens "
                "(RewardInput.response_tokens / max_new_tokens, or the verifier's max_tokens)")
        from rlxf.algorithms.shaping import overlong_buffer_tokens  # noqa: PLC0415 - as soft_overlong_penalty does

        buffer_len = overlong_buffer_tokens(self.buffer_fraction, max_len)
        value = soft_overlong_penalty(x.response_tokens, max_len, buffer_len, self.penalty)
        return RewardResult(value, {"overlong": float(x.response_tokens > max_len - buffer_len)})

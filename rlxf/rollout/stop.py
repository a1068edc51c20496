"""Stop strings: end a response once its decoded text contains one of them.

Decoding every sequence's text at every step would dominate a CPU decode step, so the check
runs in two stages. A (V,) table marks the tokens that can complete a stop string (their text
holds a stop string's last character, or is a partial UTF-8 piece, or is empty); only the
sequences that just sampled such a token have their recent tokens decoded and searched.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class StopStrings:
    """Matcher for one set of stop strings and one tokenizer."""

    def __init__(self, tokenizer, stop_strings: Sequence[str], vocab_size: int):
        if tokenizer is None:
            raise ValueError("stop_strings need a tokenizer to decode responses; build the engine with one")
        self.tokenizer = tokenizer
        self.strings = tuple(stop_strings)
        # Every token holds >= 1 byte of the text (a byte-level token may hold a single byte of a
        # multi-byte character), so the UTF-8 length + 8 tokens always reach back past the start
        # of an occurrence ending now, with a margin for a partial character before it.
        self.window = max(len(s.encode("utf-8")) for s in self.strings) + 8
        last_chars = {s[-1] for s in self.strings}
        known = min(vocab_size, len(tokenizer))
        texts = tokenizer.batch_decode([[i] for i in range(known)])
        if any(c.isspace() for c in last_chars):
            # Tokenizers that strip a token's leading space when it is decoded alone hide where
            # a whitespace ends; check every token rather than miss one.
            flags = [True] * known
        else:
            flags = [(t == "" or "\ufffd" in t or any(c in t for c in last_chars)) for t in texts]
        self.candidate = torch.zeros(vocab_size, dtype=torch.bool)
        self.candidate[:known] = torch.tensor(flags, dtype=torch.bool)

    def to(self, device) -> StopStrings:
        self.candidate = self.candidate.to(device)
        return self

    def candidates(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N,) bool: which just-sampled tokens may have completed a stop string."""
        return self.candidate[tokens]

    def ends_here(self, ids: Sequence[int]) -> bool:
        """Whether the decoded text of ``ids`` holds a stop string within its last tokens."""
        text = self.tokenizer.decode(list(ids[-self.window:]))
        return any(s in text for s in self.strings)

    def first_stop(self, ids: Sequence[int]) -> int | None:
        """Length of the shortest prefix of ``ids`` whose text holds a stop string, or None."""
        flags = self.candidates(torch.as_tensor(list(ids), dtype=torch.long).to(self.candidate.device)).tolist()
        for t, flag in enumerate(flags):
            if flag and self.ends_here(ids[: t + 1]):
                return t + 1
        return None

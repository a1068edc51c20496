"""A Bradley–Terry reward model as a verifier: ``r(x, y)``, the value head's output at the
last token of prompt + response (``rlxf.models.sequence_scores``), batched.

Under the Bradley–Terry model P(y_w ≻ y_l | x) = σ(r(x, y_w) − r(x, y_l)), so only
differences of scores mean anything; ``normalize: sigmoid`` squashes r to (0, 1) when the
reward is mixed with 0/1 checkers. Prompt and response are tokenised separately (the
prompt text already holds the chat template) and the prompt is cut from the left when the
pair exceeds ``max_length``.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

from rlxf.rewards.base import run_sync
from rlxf.rewards.types import RewardInput, RewardResult


class RewardModelVerifier:
    """Scores responses in batches of ``batch_size`` with a ``rlxf.models.ValueModel``."""

    self_limited = False
    concurrency = 1               # one forward at a time: the model is shared

    def __init__(self, name: str, model: Any, tokenizer: Any, *, batch_size: int = 16, max_length: int = 2048,
                 normalize: str = "none"):
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.normalize = normalize
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: Any) -> RewardModelVerifier:
        from rlxf.models import ValueModel, load_tokenizer  # noqa: PLC0415 - torch + transformers

        model = ValueModel.from_pretrained(cfg.path, device=cfg.device)
        return cls(cfg.label, model, load_tokenizer(cfg.path), batch_size=cfg.batch_size,
                   max_length=cfg.max_length, normalize=cfg.normalize)

    def _ids(self, x: RewardInput) -> tuple[list[int], list[int]]:
        prompt = self.tokenizer(x.prompt, add_special_tokens=False)["input_ids"] or [self._fallback_token()]
        response = self.tokenizer(x.response, add_special_tokens=False)["input_ids"]
        if len(response) >= self.max_length:  # keep the response's end and one prompt token
            response = response[-(self.max_length - 1):]
        room = self.max_length - len(response)
        return prompt[-room:], response

    def _fallback_token(self) -> int:
        tok = self.tokenizer
        return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id

    def score_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        """Scores of ``inputs`` (one forward per ``batch_size`` chunk); blocking."""
        import torch  # noqa: PLC0415

        from rlxf.models import sequence_scores  # noqa: PLC0415

        out: list[RewardResult] = []
        with self._lock, torch.no_grad():
            for k in range(0, len(inputs), self.batch_size):
                pairs = [self._ids(x) for x in inputs[k:k + self.batch_size]]
                scores = sequence_scores(self.model, [p for p, _ in pairs], [r for _, r in pairs])
                for raw in scores.tolist():
                    value = 1.0 / (1.0 + math.exp(-raw)) if self.normalize == "sigmoid" else raw
                    out.append(RewardResult(value, {"raw": raw}))
        return out

    async def ascore_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        return await asyncio.to_thread(self.score_batch, inputs)  # the forward must not block the loop

    def score(self, x: RewardInput) -> RewardResult:
        return run_sync(self.ascore_batch([x]))[0]

    def close(self) -> None:
        pass

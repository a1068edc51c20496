"""Reward functions handed over as Python callables (``rlxf.train(reward_funcs=[...])``).

Three call styles, told apart by the function's parameter names:

    def exact(sample):                          # per sample: a RewardInput -> a number
        return float(sample.response.strip() == sample.ground_truth)

    def lengths(samples):                       # batched: first parameter named `samples`
        return [-len(s.response) / 100 for s in samples]

    def trl_style(prompts, completions, **kw):  # TRL's signature: parameters `prompts` and
        return [float(c.endswith(".")) for c in completions]   # `completions`, lists of text

A TRL-style function also receives the dataset's other columns as keyword lists (the answer
column and every metadata key), as TRL passes them. A function may return a number, a
``RewardResult`` or ``{"score": ..., "metrics": {...}}`` per sample, and may be ``async``; a
``None`` for a sample (TRL's "does not apply") is recorded as that sample's verifier failure.
These functions run in this process, on the thread that scores (``reward.workers`` pools only
verifiers named in a config), so that what works in a script works here (math-verify's own
timeouts, for one, need the main thread). Hence ``reward.timeout_s`` cannot stop them: a
function that may hang belongs in a module named in the config (``type: module:function``)
with ``reward.workers`` > 0, where a call past ``timeout_s`` is killed and recorded as a timeout.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from rlxf.rewards.base import SyncVerifier, run_sync
from rlxf.rewards.custom import as_result
from rlxf.rewards.types import RewardInput, RewardResult

CallStyle = Literal["sample", "batched", "trl"]


def call_style(fn: Callable[..., Any]) -> CallStyle:
    """How ``fn`` is called, from its parameter names (see the module docstring)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: one sample at a time
        return "sample"
    if "prompts" in params and "completions" in params:
        return "trl"
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return "batched" if positional and positional[0].name == "samples" else "sample"


class CallableVerifier(SyncVerifier):
    """A verifier around a Python function, in one of the three call styles."""

    def __init__(self, name: str, fn: Callable[..., Any], *, ground_truth_key: str | None = "answer"):
        super().__init__(name)
        if not callable(fn):
            raise TypeError(f"reward function {name!r} is a {type(fn).__name__}, not a callable")
        self.fn = fn
        self.style = call_style(fn)
        # the scorer hands a verifier chunks of `batch_size`: a batched function gets the whole batch
        self.batch_size = 1 if self.style == "sample" else 2**31
        self.ground_truth_key = ground_truth_key  # the dataset column TRL-style functions see it as

    def _resolve(self, value: Any) -> Any:
        return run_sync(value) if inspect.isawaitable(value) else value

    def _result(self, value: Any) -> RewardResult:
        if value is None:
            return RewardResult(math.nan, error=f"reward function {self.name!r} returned None for this sample")
        return as_result(value, f"reward function {self.name!r}")

    def score(self, x: RewardInput) -> RewardResult:
        return self.score_batch([x])[0]

    def score_batch(self, inputs: Sequence[RewardInput]) -> list[RewardResult]:
        if not inputs:
            return []
        if self.style == "sample":
            return [self._result(self._resolve(self.fn(x))) for x in inputs]
        if self.style == "batched":
            values = self._resolve(self.fn(list(inputs)))
        else:
            values = self._resolve(self.fn(prompts=[x.prompt for x in inputs],
                                           completions=[x.response for x in inputs], **self._columns(inputs)))
        values = list(values) if values is not None else []
        if len(values) != len(inputs):
            raise ValueError(f"reward function {self.name!r} returned {len(values)} scores for a batch of "
                             f"{len(inputs)} samples; return one score (or None) per sample, in order")
        return [self._result(v) for v in values]

    def _columns(self, inputs: Sequence[RewardInput]) -> dict[str, list[Any]]:
        """The dataset's other columns, one list each, for a TRL-style function's ``**kwargs``."""
        keys = dict.fromkeys(k for x in inputs for k in x.metadata)
        columns = {k: [x.metadata.get(k) for x in inputs] for k in keys}
        if self.ground_truth_key is not None:
            columns[self.ground_truth_key] = [x.ground_truth for x in inputs]
        params = inspect.signature(self.fn).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return columns
        return {k: v for k, v in columns.items() if k in params}  # only what it asks for

    async def ascore_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        return self.score_batch(inputs)


__all__ = ["CallableVerifier", "call_style"]

"""Your own reward function, named in the config as ``package.module:function``.

    # my_rewards.py
    def brevity(sample, max_chars=200):
        return 1.0 if len(sample.response) <= max_chars else 0.0

    # config
    reward:
      verifiers:
        - {type: my_rewards:brevity, options: {max_chars: 100}}

The function gets a ``RewardInput`` and the ``options`` as keyword arguments, and returns a
number, a ``RewardResult``, or a dict ``{"score": ..., "metrics": {...}}``. It may be
``async``. It runs in the reward worker processes when ``reward.workers > 0``, so its module
must be importable there (installed, or on the path of the config's directory).

The batched and TRL-style functions ``rlxf.train`` takes (``fn(samples)``,
``fn(prompts, completions, **columns)``; ``rlxf.rewards.callables``) may be named here too, as
the ``config.yaml`` of an ``rlxf.train`` run names them: each is called in its own style, with
``options`` as keyword arguments. Named in a config, a function runs in the reward pool, one
sample per call (each call timed on its own), so a batched function gets batches of one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

from rlxf.rewards.base import SyncVerifier, run_sync
from rlxf.rewards.types import RewardInput, RewardResult


def load_function(spec: str) -> Callable[..., Any]:
    """Import ``package.module:function``; errors say which part is missing."""
    module_name, _, fn_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"custom verifier {spec!r}: cannot import module {module_name!r}: {e}") from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise AttributeError(f"custom verifier {spec!r}: module {module_name!r} has no function {fn_name!r}")
    return fn


def as_result(value: Any, where: str) -> RewardResult:
    """A custom function's return value as a RewardResult (TypeError if it cannot be)."""
    value = _scalar(value)
    if isinstance(value, RewardResult):
        return _checked(value, where)
    if isinstance(value, numbers.Real):  # bool included: True -> 1.0
        return RewardResult(float(value))
    if isinstance(value, dict) and "score" in value:
        metrics = value.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise TypeError(f"{where} returned metrics {metrics!r:.80} ({type(metrics).__name__}); metrics "
                            "must be a dict of name -> number")
        return _checked(RewardResult(value["score"], dict(metrics), value.get("error")), where, "in its dict")
    raise TypeError(f"{where} returned {type(value).__name__}; return a number, a RewardResult or "
                    "{'score': ..., 'metrics': {...}}")


def _scalar(value: Any) -> Any:
    """A 0-d numpy or torch value (``np.bool_``, ``np.float32``, ``torch.tensor(1.0)``) as its
    Python number; anything else unchanged."""
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return value.item()
    return value


def _checked(result: RewardResult, where: str, holder: str = "in its RewardResult") -> RewardResult:
    """``result`` with its score and metrics as floats and its error as text; TypeError (that
    sample's error) naming a score or metric that is not a number. A score that is not a number
    would otherwise fail the whole batch where the scores are summed."""
    score = _scalar(result.score)
    if isinstance(score, str) or not isinstance(score, numbers.Real):  # "0.9" was read as 0.9
        raise TypeError(f"{where} returned score {score!r:.80} ({type(score).__name__}) {holder}; the score "
                        "must be a number")
    metrics = {}
    for k, v in result.metrics.items():
        v = _scalar(v)
        if isinstance(v, str) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise TypeError(f"{where} returned metric {k!r} = {v!r:.80} ({type(v).__name__}); metrics must be "
                            "finite numbers")
        metrics[k] = float(v)
    error = None if result.error is None else str(result.error)
    return dataclasses.replace(result, score=float(score), metrics=metrics, error=error)


class CustomVerifier(SyncVerifier):
    def __init__(self, name: str, function: str, options: dict[str, Any] | None = None):
        super().__init__(name)
        from rlxf.rewards.callables import CallableVerifier, call_style  # noqa: PLC0415 - it imports this module

        self.spec = function
        self.fn = load_function(function)
        self.options = dict(options or {})
        self.is_async = inspect.iscoroutinefunction(self.fn)
        # a batched or TRL-style function (first parameter `samples`; `prompts` and `completions`)
        # is called in its own style, as rlxf.train calls it, not with one RewardInput
        self.batched = None
        if call_style(self.fn) != "sample":
            self.batched = CallableVerifier(name, functools.partial(self.fn, **self.options))
            self.batch_size = self.batched.batch_size

    @classmethod
    def from_config(cls, cfg: Any) -> CustomVerifier:
        return cls(cfg.label, cfg.function, cfg.options)

    def score(self, x: RewardInput) -> RewardResult:
        if self.batched is not None:
            return self.batched.score(x)
        value = self.fn(x, **self.options)
        if inspect.isawaitable(value):
            value = run_sync(value)
        return as_result(value, self.spec)

    async def ascore_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        if self.batched is not None:
            return self.batched.score_batch(inputs)
        if not self.is_async:
            return [self.score(x) for x in inputs]
        values = await asyncio.gather(*(self.fn(x, **self.options) for x in inputs))
        return [as_result(v, self.spec) for v in values]

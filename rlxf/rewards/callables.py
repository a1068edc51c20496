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
timeouts, for one, need the main thread). ``timeout_s`` (``reward.timeout_s``) limits each call:
past it, an exception is raised inside the function, which stops it at its next line of Python,
and the call's samples are recorded as timeouts (a batched or TRL-style call is one call for its
whole batch). A call blocked inside C (a ``time.sleep``, a socket read without a timeout) is
stopped only when that returns, and a function that catches ``BaseException`` and goes on is not
stopped at all; an ``async`` function is cancelled at its next ``await``. A function that may hang
in C belongs in a module named in the config (``type: module:function``) with ``reward.workers``
> 0, where a call past ``timeout_s`` is killed with its worker process.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from rlxf.rewards.base import SyncVerifier, raise_in_thread, run_sync
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


class _Stopped(BaseException):
    """Raised inside a reward function past its time limit. Not an ``Exception``: the function's
    own ``except Exception`` does not catch it."""


class _Watchdog:
    """One thread that stops the calls of every scoring thread past their time limits: a timer
    thread per call costs ~0.1-0.3 ms, more than many reward functions take. The thread starts
    with the first limited call and ends after ``idle_s`` without one."""

    idle_s = 10.0

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)   # the thread does not survive a fork

    def _reset(self) -> None:
        # the calls' threads take the lock itself: a stop landing inside Condition.__enter__ (Python
        # code) could leave it held; a C lock's ``with`` cannot be interrupted between acquire and exit
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, _Limit]] = []   # (deadline, order, call), ended ones included
        self._ended = 0          # ended calls still in the heap
        self._order = 0
        self._wake_at = math.inf  # when the thread wakes next
        self._thread: threading.Thread | None = None

    def start(self, limit: _Limit, timeout_s: float) -> None:
        """Watch ``limit``'s call from now for ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._order += 1
            heapq.heappush(self._heap, (deadline, self._order, limit))
            if self._thread is None:
                thread = threading.Thread(target=self._watch, name="rlxf-reward-watchdog", daemon=True)
                thread.start()   # set once started: a thread that could not start watches nothing
                self._thread = thread
            elif deadline < self._wake_at:
                self._cond.notify()

    def end(self, limit: _Limit) -> None:
        """The call returned or raised: never stop it from now on, and take back a stop that
        was sent but has not landed yet. Called by the call's own thread."""
        with self._lock:
            limit.running = False
            if limit.fired:
                raise_in_thread(limit.ident, None)
                return
            self._ended += 1
            while self._heap and not self._heap[0][2].running:
                heapq.heappop(self._heap)
                self._ended -= 1
            if self._ended > 1024 and 2 * self._ended > len(self._heap):  # many ended behind a long call
                self._heap = [item for item in self._heap if item[2].running]
                heapq.heapify(self._heap)
                self._ended = 0

    def _watch(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or not self._heap[0][2].running):
                    limit = heapq.heappop(self._heap)[2]
                    if limit.running:
                        limit.fired = True
                        raise_in_thread(limit.ident, _Stopped)
                    else:
                        self._ended -= 1
                # at most idle_s: a wait of an infinite limit's length would overflow
                self._wake_at = min(self._heap[0][0], now + self.idle_s) if self._heap else now + self.idle_s
                self._cond.wait(self._wake_at - now)
                if not self._heap and time.monotonic() >= self._wake_at:
                    self._thread, self._wake_at = None, math.inf
                    return


class _Limit:
    """One watched call: the thread it runs on, whether it still runs, whether it was stopped."""

    __slots__ = ("fired", "ident", "running")

    def __init__(self, ident: int):
        self.ident, self.running, self.fired = ident, True, False


_WATCHDOG = _Watchdog()


def call_limited(fn: Callable[..., Any], timeout_s: float | None, what: str, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on this thread, stopped past ``timeout_s`` (None: no limit).

    A watchdog thread raises ``_Stopped`` in this thread if the call is still running at the
    limit; the call then raises ``asyncio.TimeoutError`` naming ``what``, whatever the function
    made of ``_Stopped`` (returned, or raised something else). ``_Stopped`` is only ever raised
    while the call runs, and one set at the moment the call returns is cleared, so it cannot
    land in the caller's code.
    """
    if timeout_s is None:
        return fn(*args, **kwargs)
    limit = _Limit(threading.get_ident())
    try:
        _WATCHDOG.start(limit, timeout_s)   # a stop may land as soon as this registers the call
        try:
            value = fn(*args, **kwargs)
        finally:
            _WATCHDOG.end(limit)
    except (_Stopped, Exception):
        if not limit.fired:
            raise
    if limit.fired:  # also when the function caught _Stopped and returned or raised something else
        raise asyncio.TimeoutError(f"{what} ran past reward.timeout_s={timeout_s:g}s and was stopped")
    return value


class CallableVerifier(SyncVerifier):
    """A verifier around a Python function, in one of the three call styles; each call limited to
    ``timeout_s`` (see the module docstring)."""

    def __init__(self, name: str, fn: Callable[..., Any], *, ground_truth_key: str | None = "answer",
                 timeout_s: float | None = None):
        super().__init__(name)
        if not callable(fn):
            raise TypeError(f"reward function {name!r} is a {type(fn).__name__}, not a callable")
        self.fn = fn
        self.style = call_style(fn)
        # the scorer hands a verifier chunks of `batch_size`: a batched function gets the whole batch
        self.batch_size = 1 if self.style == "sample" else 2**31
        self.ground_truth_key = ground_truth_key  # the dataset column TRL-style functions see it as
        self.timeout_s = timeout_s

    def _call(self, inputs: Sequence[RewardInput]) -> Any:
        """The function's return value for ``inputs`` (a one-sample chunk in the per-sample
        style): a value, or an awaitable if the function is ``async``."""
        if self.style == "sample":
            args, kwargs = [inputs[0]], {}
        elif self.style == "batched":
            args, kwargs = [list(inputs)], {}
        else:
            args, kwargs = [], {"prompts": [x.prompt for x in inputs], "completions": [x.response for x in inputs],
                                **self._columns(inputs)}
        return call_limited(self.fn, self.timeout_s, f"reward function {self.name!r}", *args, **kwargs)

    def _results(self, inputs: Sequence[RewardInput], value: Any) -> list[RewardResult]:
        if self.style == "sample":
            return [self._result(value)]
        values = list(value) if value is not None else []
        if len(values) != len(inputs):
            raise ValueError(f"reward function {self.name!r} returned {len(values)} scores for a batch of "
                             f"{len(inputs)} samples; return one score (or None) per sample, in order")
        return [self._result(v) for v in values]

    def _chunks(self, inputs: Sequence[RewardInput]) -> list[Sequence[RewardInput]]:
        return [[x] for x in inputs] if self.style == "sample" else [inputs]

    def _result(self, value: Any) -> RewardResult:
        if value is None:
            return RewardResult(math.nan, error=f"reward function {self.name!r} returned None for this sample")
        return as_result(value, f"reward function {self.name!r}")

    def score(self, x: RewardInput) -> RewardResult:
        return self.score_batch([x])[0]

    def score_batch(self, inputs: Sequence[RewardInput]) -> list[RewardResult]:
        out: list[RewardResult] = []
        for chunk in self._chunks(inputs) if inputs else []:
            value = self._call(chunk)
            out += self._results(chunk, run_sync(value) if inspect.isawaitable(value) else value)
        return out

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
        """As ``score_batch``; an ``async`` function is awaited on the scorer's loop, where
        ``reward.timeout_s`` cancels it."""
        out: list[RewardResult] = []
        for chunk in self._chunks(inputs) if inputs else []:
            value = self._call(chunk)
            out += self._results(chunk, await value if inspect.isawaitable(value) else value)
        return out


__all__ = ["CallableVerifier", "call_style"]

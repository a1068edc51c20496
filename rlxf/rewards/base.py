"""The verifier interface, and the registry that builds verifiers from their config.

A verifier scores one response: ``RewardInput -> RewardResult``. Write one by subclassing

- ``SyncVerifier`` and implementing ``score(x)`` -- plain CPU work (checkers, parsers); or
- ``AsyncVerifier`` and implementing ``async ascore(x)`` -- I/O (sandboxes, HTTP judges).

Every verifier is *called* the same way, ``await v.ascore_batch(xs)``, so the scorer does not
care which kind it has. CPU-bound kinds that may hang or crash (a sympy parse, a user
function; see ``is_isolated``) run in worker processes when ``reward.workers > 0``. Verifiers
that hold their own processes, models or connections (code, reward_model, judge) run in the
scorer's process.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from rlxf.config.reward import VERIFIER_TYPES
from rlxf.rewards.types import RewardInput, RewardResult

T = TypeVar("T")


@runtime_checkable
class Verifier(Protocol):
    """What the scorer calls. Implement it through ``SyncVerifier`` or ``AsyncVerifier``."""

    name: str

    async def ascore_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        """One result per input, in order. May raise: the scorer records the failure."""
        ...

    def close(self) -> None:
        """Release processes, models and connections."""
        ...


class SyncVerifier(ABC):
    """Base for CPU-bound verifiers: implement ``score``."""

    def __init__(self, name: str):
        self.name = name

    @abstractmethod
    def score(self, x: RewardInput) -> RewardResult:
        """Score one response."""

    async def ascore(self, x: RewardInput) -> RewardResult:
        return self.score(x)

    async def ascore_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        return [self.score(x) for x in inputs]

    def close(self) -> None:  # noqa: B027 - most verifiers hold nothing to release
        """Release what the verifier holds (nothing by default)."""


class AsyncVerifier(ABC):
    """Base for I/O-bound verifiers: implement ``ascore``; ``concurrency`` calls run at once."""

    def __init__(self, name: str, concurrency: int = 16):
        self.name = name
        self.concurrency = concurrency

    @abstractmethod
    async def ascore(self, x: RewardInput) -> RewardResult:
        """Score one response."""

    def score(self, x: RewardInput) -> RewardResult:
        """Blocking form of ``ascore`` (for scripts and tests)."""
        return run_sync(self.ascore(x))

    async def ascore_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(x: RewardInput) -> RewardResult:
            async with gate:
                return await self.ascore(x)

        return list(await asyncio.gather(*(one(x) for x in inputs)))

    def close(self) -> None:  # noqa: B027 - most verifiers hold nothing to release
        """Release what the verifier holds (nothing by default)."""


def raise_in_thread(ident: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in the thread ``ident`` at its next Python bytecode (a call blocked in C
    gets it when that returns), or, with None, take back one not raised yet. How a verifier call
    past its time limit is stopped: a thread cannot be killed."""
    import ctypes  # noqa: PLC0415

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc) if exc else None)


def run_sync(awaitable: Awaitable[T]) -> T:
    """Run a coroutine to completion from sync code, even if this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(awaitable))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_as_coroutine(awaitable))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, name="rlxf-run-sync")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


# --- registry: verifier type -> factory(config) ------------------------------------------------

def _factory(module: str, cls: str) -> Callable[[Any], Verifier]:
    def build(cfg: Any) -> Verifier:
        return getattr(importlib.import_module(module), cls).from_config(cfg)
    return build


FACTORIES: dict[str, Callable[[Any], Verifier]] = {
    "math": _factory("rlxf.rewards.answers", "MathVerifier"),
    "exact": _factory("rlxf.rewards.answers", "ExactVerifier"),
    "numeric": _factory("rlxf.rewards.answers", "NumericVerifier"),
    "format": _factory("rlxf.rewards.format", "FormatVerifier"),
    "overlong": _factory("rlxf.rewards.format", "OverlongVerifier"),
    "reasoning_gym": _factory("rlxf.rewards.reasoning_gym", "ReasoningGymVerifier"),
    "code": _factory("rlxf.rewards.code", "CodeVerifier"),
    "reward_model": _factory("rlxf.rewards.reward_model", "RewardModelVerifier"),
    "judge": _factory("rlxf.rewards.judge", "JudgeVerifier"),
    "custom": _factory("rlxf.rewards.custom", "CustomVerifier"),
}


def build_verifier(cfg: Any) -> Verifier:
    """The verifier for one entry of ``reward.verifiers`` (its modules are imported now)."""
    kind = cfg.type
    if kind not in FACTORIES:
        raise ValueError(f"unknown verifier type {kind!r}; valid: {', '.join(VERIFIER_TYPES)}")
    return FACTORIES[kind](cfg)


def is_isolated(cfg: Any) -> bool:
    """Whether this kind runs in worker processes when there are any (see module doc)."""
    return cfg.type in ("math", "exact", "numeric", "format", "overlong", "reasoning_gym", "custom")

"""Registries of the algorithm plug points: one dict per kind, one call signature per kind.

    @register("advantage", "my_estimator")
    def my_estimator(rewards, mask, group_ids, values, params): ...

    fn = get("advantage", "my_estimator")      # the trainer calls every estimator the same way
    names("advantage")                          # ['gae', 'grpo', ..., 'my_estimator']

    @register("advantage", "my_critic_estimator", needs=Needs(values=True))
    def ...                                     # placement builds a critic for it

    @register("policy_loss", "my_loss", needs=Needs(zero_advantage_rows=False))
    def ...                                     # Â = 0 adds nothing: the actor skips such rows

What a function needs from the rest of the run (a critic's values, groups of n >= 2 samples
per prompt) is declared where it is registered, as ``Needs``; the placement, ``rlxf explain``
and config validation ask ``needs(kind, name)`` instead of comparing names.

The kinds and the signature every function of a kind must accept:

- ``advantage``: ``fn(rewards, mask, group_ids, values, params) -> (advantages, returns)``
  (see ``rlxf.algorithms.advantages``);
- ``policy_loss``: ``fn(logprobs, old_logprobs, advantages, mask, params, rollout_logprobs=None)
  -> (token_loss, metrics)`` (see ``rlxf.algorithms.policy_losses``);
- ``loss_agg``: ``fn(token_loss, mask, *, num_tokens=None, num_seqs=None, norm=None) -> loss``
  (see ``rlxf.algorithms.aggregation``);
- ``off_policy``: ``fn(old_logprobs, rollout_logprobs, mask, params) -> (weight, metrics)``, a
  detached per-token weight that multiplies any policy loss (see ``rlxf.algorithms.off_policy``).

``register`` checks the signature when a function is registered, so a plugin with the wrong
arguments fails at import with a message saying what is expected, not mid-run. Registration
happens at import time (built-ins when ``rlxf.algorithms`` is imported, plugins when the
config's ``plugins`` modules are imported); nothing registers at run time.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# How each kind is called: (positional argument count, keyword arguments), and the
# signature shown in errors.
_CALLS: dict[str, tuple[int, tuple[str, ...], str]] = {
    "advantage": (5, (), "(rewards, mask, group_ids, values, params) -> (advantages, returns)"),
    "policy_loss": (
        5, ("rollout_logprobs",),
        "(logprobs, old_logprobs, advantages, mask, params, rollout_logprobs=None) -> (token_loss, metrics)",
    ),
    "loss_agg": (
        2, ("num_tokens", "num_seqs", "norm"),
        "(token_loss, mask, *, num_tokens=None, num_seqs=None, norm=None) -> loss",
    ),
    "off_policy": (4, (), "(old_logprobs, rollout_logprobs, mask, params) -> (weight, metrics)"),
}

KINDS: tuple[str, ...] = tuple(_CALLS)

_REGISTRIES: dict[str, dict[str, Callable[..., Any]]] = {kind: {} for kind in KINDS}


@dataclass(frozen=True)
class Needs:
    """What a registered function needs from the run around it."""

    values: bool = False    # V(s_t) from a learned critic (GAE): the placement builds one
    groups: bool = False    # several samples per prompt, compared with each other: rollout.n >= 2
    # policy losses: whether a sample whose advantages are all 0 can change the loss or its
    # gradient. False declares that it adds exactly 0 to both (every built-in loss is -Â x
    # something per token), so the actor skips the forward and backward of such samples;
    # the safe default, True, runs every sample.
    zero_advantage_rows: bool = True


_NEEDS: dict[str, dict[str, Needs]] = {kind: {} for kind in KINDS}


class UnknownNameError(KeyError, ValueError):
    """A registry name (or kind) that does not exist. The message lists the valid ones.

    A KeyError (it is a failed lookup) and a ValueError (it is usually a bad config value).
    """

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


def _check_kind(kind: str) -> dict[str, Callable[..., Any]]:
    if kind not in _REGISTRIES:
        raise UnknownNameError(f"unknown registry kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    return _REGISTRIES[kind]


def _check_signature(kind: str, name: str, fn: Callable[..., Any]) -> None:
    n_positional, keywords, shown = _CALLS[kind]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature; trust them
        return
    try:
        sig.bind(*([None] * n_positional), **dict.fromkeys(keywords))
    except TypeError as e:
        raise TypeError(
            f"cannot register {fn!r} as {kind} {name!r}: its arguments {sig} do not accept the "
            f"{kind} call {shown} ({e}). Change its signature to match."
        ) from None


def register(kind: str, name: str, *, needs: Needs = Needs()) -> Callable[[F], F]:
    """Decorator: register ``fn`` under ``name`` in the ``kind`` registry; returns ``fn`` unchanged.

    ``needs`` declares what ``fn`` needs from the run (see ``Needs``).

    Raises UnknownNameError for an unknown kind, TypeError when ``fn`` cannot be called with
    the kind's signature, and ValueError when ``name`` is taken by a different function
    (re-importing the module that registered it is allowed).
    """
    registry = _check_kind(kind)
    if not name or not isinstance(name, str):
        raise ValueError(f"registry names are non-empty strings, got {name!r}")

    def decorator(fn: F) -> F:
        _check_signature(kind, name, fn)
        old = registry.get(name)
        if old is not None and old is not fn and (
            getattr(old, "__module__", None), getattr(old, "__qualname__", None)
        ) != (getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)):
            raise ValueError(
                f"{kind} {name!r} is already registered by {old.__module__}.{old.__qualname__}; "
                f"choose another name for {fn.__module__}.{fn.__qualname__}"
            )
        registry[name] = fn
        _NEEDS[kind][name] = needs
        return fn

    return decorator


def get(kind: str, name: str) -> Callable[..., Any]:
    """The function registered as ``name`` in ``kind``; UnknownNameError lists the valid names."""
    registry = _check_kind(kind)
    try:
        return registry[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))} "
            f"(register your own with @rlxf.algorithms.register({kind!r}, name))"
        ) from None


def needs(kind: str, name: str) -> Needs:
    """What the function registered as ``name`` needs; UnknownNameError like ``get``."""
    get(kind, name)
    return _NEEDS[kind][name]


def names(kind: str) -> list[str]:
    """The registered names of ``kind``, sorted."""
    return sorted(_check_kind(kind))

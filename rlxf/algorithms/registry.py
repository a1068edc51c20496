"""Registries of the algorithm plug points: one dict per kind, one call signature per kind.

    @register("advantage", "my_estimator")
    def my_estimator(rewards, mask, group_ids, values, params): ...

    fn = get("advantage", "my_estimator")      # the trainer calls every estimator the same way
    names("advantage")                          # ['gae', 'grpo', ..., 'my_estimator']

    @register("advantage", "my_critic_estimator", needs=Needs(values=True))
    def ...                                     # placement builds a critic for it

    @register("policy_loss", "my_loss", needs=Needs(zero_advantage_rows=False))
    def ...                                     # Â = 0 adds nothing: the actor skips such rows

    @register("advantage", "my_maxrl", needs=Needs(groups=True, nonnegative_returns=True))
    def ...                                     # divides by returns: penalties refused at load

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
arguments fails at import with a message saying what is expected, not mid-run. The trainer
takes functions through ``checked``: a plugin's first call has its return value checked
against its kind's contract (a pair or a 0-dim loss, shapes (B, T), a float dtype, a loss with
a gradient), so a plugin returning (B,) advantages or an already-aggregated loss fails at its
first step, naming the function, instead of training wrongly. Registration
happens at import time (built-ins when ``rlxf.algorithms`` is imported, plugins when the
config's ``plugins`` modules are imported); nothing registers at run time.
"""

from __future__ import annotations

import functools
import inspect
import numbers
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
    # advantage estimators: whether every sample's return must be >= 0 (maxrl divides by the
    # group's mean return, a pass rate); config validation then refuses the settings that
    # subtract from returns (a KL penalty in the reward, the overlong penalty)
    nonnegative_returns: bool = False


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
            f"cannot register {_describe(fn)} as {kind} {name!r}: its arguments {sig} do not accept "
            f"the {kind} call {shown} ({e}). Change its signature to match."
        ) from None


def _describe(fn: Callable[..., Any]) -> str:
    """``module.qualname at file:line`` of a function, for error messages."""
    where = ""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is not None:
        where = f" at {code.co_filename}:{code.co_firstlineno}"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}{where}"


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
                f"{kind} {name!r} is already registered by {_describe(old)}; choose another name for "
                f"{_describe(fn)}"
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


class ContractError(TypeError):
    """A registered function returned something its kind's callers cannot use."""


def checked(kind: str, name: str) -> Callable[..., Any]:
    """The function registered as ``name``; a plugin's (not rlxf's own) wrapped so that what its
    first call returns is checked against the contract of ``kind`` (module docstring): a pair
    where a pair is due, shapes (B, T) of the call's own mask, a float dtype, a loss that keeps
    its gradient, a 0-dim aggregate. A plugin returning (B,) advantages or a loss it already
    reduced to a number raises ContractError naming it, at its first step, instead of a shape
    error deep in the step or (the reduced loss broadcast back) training that is silently wrong.
    Nothing is called on made-up data: a plugin's state and assumptions are its own."""
    fn = get(kind, name)
    if (getattr(fn, "__module__", None) or "").startswith("rlxf."):
        return fn
    state = {"checked": False}

    @functools.wraps(fn)   # __wrapped__: the plugin's function itself
    def first_call_checked(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if not state["checked"]:
            check_result(kind, name, out, *args, **kwargs)
            state["checked"] = True
        return out

    return first_call_checked


def check_result(kind: str, name: str, out: Any, *args: Any, **kwargs: Any) -> None:
    """Raise ContractError if ``out``, what the ``kind`` function ``name`` returned for the call
    ``(*args, **kwargs)``, breaks the kind's contract; see ``checked``."""
    import torch  # noqa: PLC0415 - the registry itself needs no torch

    mask = {"advantage": 1, "policy_loss": 3, "off_policy": 2, "loss_agg": 1}[kind]
    mask = args[mask] if len(args) > mask else kwargs.get("mask")
    dims = tuple(mask.shape) if isinstance(mask, torch.Tensor) else None
    what = f"{kind} {name!r} ({_describe(get(kind, name))})"

    def fail(problem: str, expected: str) -> ContractError:
        return ContractError(f"{what} {problem}; it must return {expected}")

    def tensor(value: Any, label: str, expected: str, shape: tuple[int, ...] | None) -> Any:
        if not isinstance(value, torch.Tensor):
            raise fail(f"returned {label} as {type(value).__name__}, not a tensor", expected)
        if shape is not None and tuple(value.shape) != shape:
            raise fail(f"returned {label} of shape {tuple(value.shape)}, not {shape}", expected)
        if not value.is_floating_point():
            raise fail(f"returned {label} of dtype {value.dtype}, not a float dtype", expected)
        return value

    def pair(value: Any, expected: str) -> tuple[Any, Any]:
        if not isinstance(value, tuple | list) or len(value) != 2:
            got = f"a {type(value).__name__}" + (f" of {len(value)} items" if isinstance(value, tuple | list) else "")
            raise fail(f"returned {got}, not a pair", expected)
        return value[0], value[1]

    def metrics(value: Any, expected: str) -> None:
        if not isinstance(value, dict):
            raise fail(f"returned metrics as {type(value).__name__}, not a dict", expected)
        for key, v in value.items():
            if (isinstance(v, torch.Tensor) and v.numel() != 1) or not isinstance(v, torch.Tensor | numbers.Real):
                shown = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                raise fail(f"returned metric {key!r} as {shown}, not one number", expected)

    shape = f"(B, T) = {dims}" if dims else "(B, T)"
    if kind == "advantage":
        expected = f"(advantages, returns), two float tensors of shape {shape}, one value per token"
        adv, ret = pair(out, expected)
        tensor(adv, "advantages", expected, dims)
        tensor(ret, "returns", expected, dims)
    elif kind == "policy_loss":
        expected = (f"(token_loss, metrics): a float tensor of shape {shape}, one loss per token, computed from "
                    f"logprobs (the aggregation, algorithm.loss_agg, reduces it), and a dict of numbers")
        token_loss, m = pair(out, expected)
        tensor(token_loss, "token_loss", expected, dims)
        if args and isinstance(args[0], torch.Tensor) and args[0].requires_grad and not token_loss.requires_grad:
            raise fail("returned a token_loss with no gradient (detached from logprobs)", expected)
        metrics(m, expected)
    elif kind == "off_policy":
        expected = f"(weight, metrics): a float tensor of shape {shape}, one weight per token, and a dict of numbers"
        weight, m = pair(out, expected)
        tensor(weight, "weight", expected, dims)
        metrics(m, expected)
    else:
        expected = "the loss as a 0-dim float tensor that has a gradient"
        tensor(out, "the loss", expected, ())
        if args and isinstance(args[0], torch.Tensor) and args[0].requires_grad and not out.requires_grad:
            raise fail("returned a loss with no gradient (detached from token_loss)", expected)

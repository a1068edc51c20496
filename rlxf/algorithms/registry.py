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
arguments fails at import with a message saying what is expected, not mid-run. ``check_call``
calls a function once on a small made-up batch and checks what it returns against its kind's
contract (a pair or a 0-dim loss, shapes (B, T), a float dtype, a loss with a gradient); config
loading runs it on the functions a config selects, so a plugin returning (B,) advantages or an
already-aggregated loss fails before any model loads, naming the function. Registration
happens at import time (built-ins when ``rlxf.algorithms`` is imported, plugins when the
config's ``plugins`` modules are imported); nothing registers at run time.
"""

from __future__ import annotations

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


# the made-up batch of check_call: B = 4 sequences (two groups of two) x T = 3 tokens; B != T,
# so (B,) and (T,) results, which broadcast against (B, T) without an error, are told apart
_PROBE_MASK = ((1, 1, 1), (1, 1, 0), (1, 1, 1), (1, 0, 0))
_PROBE_SCORES = (1.0, 0.0, 0.5, 1.0)   # >= 0: maxrl refuses negative returns


def check_call(kind: str, name: str, params: Any, *, norm: float = 3.0) -> None:
    """Call the function registered as ``name`` once on a made-up batch and check its return
    value against the contract of ``kind`` (module docstring); ``params`` are the run's
    ``AdvantageParams`` / ``PolicyLossParams`` / ``OffPolicyParams`` (None for ``loss_agg``),
    ``norm`` the aggregation's. Raises ContractError naming the function, where it is defined,
    what it returned and what it should return (or what it raised on the batch)."""
    import torch  # noqa: PLC0415 - the registry itself needs no torch

    fn = get(kind, name)
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor(_PROBE_MASK, dtype=torch.float32)
    b, t = mask.shape
    last = mask.sum(-1).long() - 1
    rewards = torch.zeros(b, t).index_put_((torch.arange(b), last), torch.tensor(_PROBE_SCORES))
    logprobs = (-torch.rand(b, t, generator=g) - 0.1).requires_grad_()
    old = logprobs.detach() - 0.05 * torch.rand(b, t, generator=g)
    advantages = torch.randn(b, t, generator=g) * mask
    shape = f"(B, T) = ({b}, {t})"
    what = f"{kind} {name!r} ({_describe(fn)})"

    def fail(problem: str, expected: str) -> ContractError:
        return ContractError(f"{what}, called on a made-up batch of {b} sequences x {t} tokens, {problem}; "
                             f"it must return {expected}")

    def tensor(value: Any, label: str, expected: str, *, dims: tuple[int, ...]) -> Any:
        if not isinstance(value, torch.Tensor):
            raise fail(f"returned {label} as {type(value).__name__}, not a tensor", expected)
        if tuple(value.shape) != dims:
            raise fail(f"returned {label} of shape {tuple(value.shape)}, not {dims}", expected)
        if not value.is_floating_point():
            raise fail(f"returned {label} of dtype {value.dtype}, not a float dtype", expected)
        return value

    def pair(out: Any, expected: str) -> tuple[Any, Any]:
        if not isinstance(out, tuple | list) or len(out) != 2:
            got = f"a {type(out).__name__}" + (f" of {len(out)} items" if isinstance(out, tuple | list) else "")
            raise fail(f"returned {got}, not a pair", expected)
        return out[0], out[1]

    def metrics(value: Any, expected: str) -> None:
        if not isinstance(value, dict):
            raise fail(f"returned metrics as {type(value).__name__}, not a dict", expected)
        for key, v in value.items():
            if isinstance(v, torch.Tensor) and v.numel() != 1 or not isinstance(v, torch.Tensor | numbers.Real):
                shown = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                raise fail(f"returned metric {key!r} as {shown}, not one number", expected)

    try:
        if kind == "advantage":
            expected = f"(advantages, returns), two float tensors of shape {shape}, one value per token"
            values = torch.randn(b, t, generator=g) if needs(kind, name).values else None
            adv, ret = pair(fn(rewards, mask, torch.tensor([0, 0, 1, 1]), values, params), expected)
            tensor(adv, "advantages", expected, dims=(b, t))
            tensor(ret, "returns", expected, dims=(b, t))
        elif kind == "policy_loss":
            expected = (f"(token_loss, metrics): a float tensor of shape {shape}, one loss per token, computed "
                        f"from logprobs (the aggregation, algorithm.loss_agg, reduces it), and a dict of numbers")
            token_loss, m = pair(fn(logprobs, old, advantages, mask, params, old), expected)
            tensor(token_loss, "token_loss", expected, dims=(b, t))
            if not token_loss.requires_grad:
                raise fail("returned a token_loss with no gradient (detached from logprobs)", expected)
            metrics(m, expected)
        elif kind == "off_policy":
            expected = f"(weight, metrics): a float tensor of shape {shape}, one weight per token, and a dict of numbers"
            weight, m = pair(fn(old, old - 0.01, mask, params), expected)
            tensor(weight, "weight", expected, dims=(b, t))
            metrics(m, expected)
        else:
            expected = "the loss as a 0-dim float tensor that has a gradient"
            n_tok, n_seq = mask.sum(), (mask.sum(-1) > 0).sum().to(mask.dtype)
            loss = tensor(fn(logprobs * 1.0, mask, num_tokens=n_tok, num_seqs=n_seq, norm=norm), "the loss",
                          expected, dims=())
            if not loss.requires_grad:
                raise fail("returned a loss with no gradient (detached from token_loss)", expected)
    except ContractError:
        raise
    except Exception as e:  # noqa: BLE001 - the function's own failure, reported with where it happened
        import traceback  # noqa: PLC0415

        frame = traceback.extract_tb(e.__traceback__)[-1]
        raise ContractError(f"{what} raised {type(e).__name__} at {frame.filename}:{frame.lineno} when called "
                            f"on a made-up batch of {b} sequences x {t} tokens: {e}") from None

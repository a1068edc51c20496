"""The environment protocol: Gymnasium's reset / step, on chat text.

    env = build_env("guess_number", {"low": 1, "high": 16})
    observation = env.reset(task)                     # [{"role": "user", "content": "..."}]
    result = env.step("<answer>8</answer>")           # StepResult(observation, reward, terminated, truncated, info)

One ``Env`` object plays one episode at a time; the agent loop (``rlxf.envs.agent``) makes a
fresh one per episode with ``build_env``, so an environment may keep its episode state in
``self`` without locks. ``reset`` gets the episode's ``EnvTask`` (the prompt's ground truth and
metadata from the data pipeline, and a seed) and returns the first observation as chat
messages; ``step`` gets the text of the model's turn. ``terminated`` ends the episode because
the environment says so (solved, lost); ``truncated`` ends it for a limit the environment keeps
(Gymnasium's meaning). Anything an environment raises or returns malformed ends only its own
episode, with the error recorded (``rlxf.envs.agent``).

Environments are registered by name (``@register_env("name")``); a user's own is a class given
as ``package.module:Class`` in ``env.name``, constructed with ``env.options`` as keyword
arguments.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# {"role": "user" | "tool" | "system", "content": str}; a tool message may add the "tool_call_id"
# and "name" its chat template renders (rlxf.envs.tools)
Message = dict[str, Any]

# The roles an environment's (or an agent program's) messages may have: "ipython" is Llama 3.1's
# tool results, "developer" OpenAI's instructions. Any other role may be rendered as a model turn
# ("assistant"; Gemma's templates name it "model", ShareGPT-style ones "gpt"), which only the
# model writes: a turn it never sampled would sit in its context as its own.
ENV_ROLES = ("system", "developer", "user", "tool", "ipython")


@dataclass(frozen=True)
class EnvTask:
    """What one episode is about: a prompt of the data pipeline, seen by the environment."""

    uid: str                      # the prompt's uid
    prompt: str                   # the prompt's text before the chat template (the question)
    ground_truth: Any = None      # the prompt's answer / secret / tests
    metadata: dict[str, Any] = field(default_factory=dict)
    seed: int = 0                 # the episode's seed (differs between the n episodes of a group)


@dataclass
class StepResult:
    """What ``Env.step`` returns (Gymnasium's 5-tuple, named)."""

    observation: list[Message]    # messages appended after the model's turn (may be empty when done)
    reward: float = 0.0           # reward of this turn
    terminated: bool = False      # the episode is over (solved, failed)
    truncated: bool = False       # the environment cut the episode short
    info: dict[str, Any] = field(default_factory=dict)  # JSON-able details, kept in samples.jsonl


@runtime_checkable
class Env(Protocol):
    """A text environment for one episode at a time."""

    def reset(self, task: EnvTask) -> list[Message]:
        """Start an episode; the first observation (at least one message, the last not from the assistant)."""
        ...

    def step(self, action: str) -> StepResult:
        """The model's turn (its text, control tokens removed: ``rlxf.models.tokenizer.reply_text``) ->
        the environment's answer."""
        ...

    # Optional: ``close(self) -> None``, called once when the episode is over (ended, failed or
    # cut off) and no call of the environment is running (one past env.step_timeout_s: when it
    # returns), to release what the environment holds (a process, a browser, a container).


class EnvError(ValueError):
    """A configuration problem with an environment (unknown name, bad options): stops the run."""


EnvFactory = Callable[..., Env]
_ENVS: dict[str, EnvFactory] = {}


def register_env(name: str) -> Callable[[EnvFactory], EnvFactory]:
    """Register an environment class (or factory taking keyword options) under ``name``."""
    def deco(factory: EnvFactory) -> EnvFactory:
        if name in _ENVS and _ENVS[name] is not factory:
            raise ValueError(f"environment {name!r} is already registered")
        _ENVS[name] = factory
        return factory
    return deco


def env_names() -> list[str]:
    import rlxf.envs.builtin  # noqa: F401 - registers the built-in environments

    return sorted(_ENVS)


def import_object(spec: str, what: str, config_key: str) -> Any:
    """The object named ``package.module:attr``, or an error saying what could not be found."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise EnvError(f"{config_key}={spec!r}: a {what} outside rlxf is written `package.module:Name`")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise EnvError(f"{config_key}={spec!r}: cannot import module {module_name!r} ({e}); "
                       f"is it installed or on PYTHONPATH?") from e
    try:
        return getattr(module, attr)
    except AttributeError:
        raise EnvError(f"{config_key}={spec!r}: module {module_name!r} has no attribute {attr!r}") from None


def env_factory(name: str) -> EnvFactory:
    """The class registered as ``name``, or the one ``package.module:Class`` names."""
    if ":" in name:
        factory = import_object(name, "environment", "env.name")
        if not callable(factory):
            raise EnvError(f"env.name={name!r} is not a class or factory (got {type(factory).__name__})")
        return factory
    names = env_names()
    if name not in _ENVS:
        raise EnvError(f"unknown environment {name!r} (env.name); valid: {', '.join(names)}, "
                       f"or `package.module:Class` for your own (one registered with @register_env in your "
                       f"module is known once the module is imported: list it in `plugins:`)")
    return _ENVS[name]


def build_env(name: str, options: dict[str, Any] | None = None) -> Env:
    """A fresh environment ``name`` made with ``options``; bad options name the environment."""
    factory = env_factory(name)
    try:
        env = factory(**dict(options or {}))
    except TypeError as e:
        raise EnvError(f"environment {name!r} does not accept env.options {sorted(options or {})}: {e}") from e
    if not isinstance(env, Env):
        raise EnvError(f"environment {name!r} built a {type(env).__name__}, which lacks reset(task) / step(action)")
    return env

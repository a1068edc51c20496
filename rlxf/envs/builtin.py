"""Built-in environments: a guessing game, tool-use arithmetic, any single-turn task, and an
adapter for text environments of other packages (Gymnasium API).

    env:  {name: guess_number}                          # data.task: guess_number
    env:  {name: tool_arithmetic, tools: [calculator]}  # data.task: arithmetic
    env:  {name: single_turn}                           # any data; the reward: verifiers score it
"""

from __future__ import annotations

import re

from rlxf.envs.base import EnvError, EnvTask, Message, StepResult, register_env
from rlxf.envs.tools import ToolSet

_INTEGER = re.compile(r"-?\d+")


def last_integer(text: str) -> int | None:
    found = _INTEGER.findall(text)
    return int(found[-1]) if found else None


@register_env("guess_number")
class GuessNumberEnv:
    """Guess the secret integer in [low, high]; the environment answers `higher` or `lower`.

    The secret is the prompt's ground truth (the ``guess_number`` data task). Reward 1 for the
    right guess (``info["success"]``), ``turn_penalty`` added each wrong turn; a turn without a
    number is answered "Answer with a number." The last integer in the model's turn is its guess.
    """

    def __init__(self, low: int = 1, high: int = 16, turn_penalty: float = 0.0):
        if low >= high:
            raise EnvError(f"guess_number: env.options low={low} must be below high={high}")
        self.low, self.high, self.turn_penalty = low, high, turn_penalty
        self.secret: int | None = None

    def reset(self, task: EnvTask) -> list[Message]:
        secret = last_integer(str(task.ground_truth))
        if secret is None or not self.low <= secret <= self.high:
            raise ValueError(f"guess_number: prompt {task.uid} has ground truth {task.ground_truth!r}, not an "
                             f"integer in [{self.low}, {self.high}] (use data.task=guess_number with the same range)")
        self.secret = secret
        return [{"role": "user", "content": f"Guess my number from {self.low} to {self.high}."}]

    def step(self, action: str) -> StepResult:
        guess = last_integer(action)
        if guess == self.secret:
            return StepResult([], reward=1.0, terminated=True, info={"success": True, "guess": guess})
        hint = "Answer with a number." if guess is None else ("higher" if guess < self.secret else "lower")
        return StepResult([{"role": "user", "content": hint}], reward=self.turn_penalty,
                          info={"success": False, "guess": guess})


@register_env("tool_arithmetic")
class ToolArithmeticEnv:
    """An arithmetic problem (the ``arithmetic`` task's expression), with tools to call.

    A turn with tool calls gets the tool messages back; the first turn without one is the final
    answer: reward 1 when its last integer is the answer (``info["success"]``), else 0. Tool-call
    failures are counted in ``info["tool_errors"]``.
    """

    def __init__(self, tools: ToolSet | None = None, system_prompt: str | None = None):
        if tools is None or not tools.functions:
            raise EnvError("tool_arithmetic needs tools: set env.tools, e.g. [calculator]")
        self.tools = tools
        self.system_prompt = system_prompt
        self.answer: int | None = None
        self.turn = 0        # model turns stepped so far: numbers the tool calls' ids

    def reset(self, task: EnvTask) -> list[Message]:
        expression = task.metadata.get("expression")
        if expression is None:
            raise ValueError(f"tool_arithmetic: prompt {task.uid} has no metadata['expression']; "
                             f"use data.task=arithmetic")
        self.answer, self.turn = int(str(task.ground_truth)), 0
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return self.tools.describe(system + [{"role": "user", "content": f"{expression}="}])

    def step(self, action: str) -> StepResult:
        used = self.tools.run(action, turn=self.turn)
        self.turn += 1
        info = {"tool_calls": used.calls, "tool_errors": used.errors, "tool_trace": used.trace}
        if used.calls:
            return StepResult(used.messages, reward=0.0, info=info)
        solved = last_integer(action) == self.answer
        return StepResult([], reward=float(solved), terminated=True, info={**info, "success": solved})


@register_env("single_turn")
class SingleTurnEnv:
    """Any single-turn task as a one-step episode: the data prompt as it is, one model turn, reward 0.

    Score it with the ``reward:`` verifiers (``env.use_verifiers: true``), as without an environment.
    """

    def reset(self, task: EnvTask) -> list[Message]:
        return []   # empty first observation: the data prompt's own ids

    def step(self, action: str) -> StepResult:
        return StepResult([], reward=0.0, terminated=True)


@register_env("gymnasium")
class GymnasiumEnv:
    """An environment of another package, through the Gymnasium API, whose observations and
    actions are text (optional extra ``rlxf[gym]``).

        env: {name: gymnasium, options: {id: "my_package/Wordle-v0", kwargs: {word_length: 5}}}

    ``reset`` calls ``env.reset(seed=task.seed, options={"prompt", "ground_truth", "metadata"})``
    (an environment that draws its own puzzle ignores the options); ``step`` passes the model's
    text as the action. An observation is a string (a user message) or a list of chat messages;
    Gymnasium's ``(obs, reward, terminated, truncated, info)`` maps onto ``StepResult`` one to one,
    so ``info["success"]`` counts as the episode's verdict here too.
    """

    def __init__(self, id: str, kwargs: dict | None = None):  # noqa: A002 - Gymnasium's own name
        try:
            import gymnasium
        except ImportError:
            raise EnvError("env.name=gymnasium needs the gymnasium package: pip install 'rlxf[gym]'") from None
        try:
            # the passive checker expects array observations; text environments would only warn
            self.env = gymnasium.make(id, disable_env_checker=True, **dict(kwargs or {}))
        except gymnasium.error.Error as e:
            raise EnvError(f"env.options.id={id!r}: {e} (is the package that registers it imported, "
                           f"e.g. through `plugins:`?)") from None

    def reset(self, task: EnvTask) -> list[Message]:
        obs, _ = self.env.reset(seed=task.seed, options={"prompt": task.prompt, "ground_truth": task.ground_truth,
                                                         "metadata": task.metadata})
        return _as_messages(obs)

    def step(self, action: str) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:   # the last observation ("Yes, it was apple") is the episode's final_observation
            obs = obs if isinstance(obs, str) or _are_messages(obs) else []   # many environments end on none
        return StepResult(_as_messages(obs), reward=float(reward), terminated=bool(terminated),
                          truncated=bool(truncated), info=dict(info))

    def close(self) -> None:
        self.env.close()


def _are_messages(obs) -> bool:
    return isinstance(obs, list) and all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                         and isinstance(m.get("content"), str) for m in obs)


def _as_messages(obs) -> list[Message]:
    if isinstance(obs, str):
        return [{"role": "user", "content": obs}]
    if isinstance(obs, list):
        return obs   # chat messages; the agent loop checks their shape
    raise ValueError(f"a gymnasium observation must be text or chat messages, got {type(obs).__name__}")

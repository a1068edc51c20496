"""The agent loop: episodes of engine turns and environment steps, one token trajectory each.

    trajs = run_episodes(engine, tokenizer, make_env, prompts, seeds, sampling, limits)

Every prompt gets ``sampling.n`` episodes (a GRPO group), each with its own environment. All
live episodes advance together: one engine call samples the next model turn of every episode
(batched, each request with its own seed), then the environments step concurrently, each in its
own thread under ``limits.step_timeout_s``. The token sequence of an episode is built by
appending (``rlxf.envs.tokens``): the engine's ids with loss_mask 1, log-probs and the policy
version of each token (``Completion.versions()``: turns sampled under different weights keep
their own); the template's and the environment's ids with loss_mask 0 (and version -1).

How each episode ended is ``episode["end"]`` (``ENDS``), and each step logs the share of each
(``env/end/terminated``, ``.../truncated``, ``.../max_turns``, ``.../max_total_tokens``,
``.../error``; ``turn_metrics``).

``limits.max_total_tokens`` bounds the whole sequence: a model turn samples at most what is left,
and an observation that would leave no room for another model token ends the episode
(``max_total_tokens``) without being appended (it is kept in ``final_observation``), so no
trajectory is ever longer than the limit, whatever an environment or a tool returns.

Failures stay inside their episode: an environment that raises, hangs past the timeout, or
returns something that is not a ``StepResult`` (or one whose reward is not a finite number, whose
info is not a dict or holds a ``success`` that is no flag or ``tool_errors`` that is no count, or
whose messages are not text, hold the text of the chat template's turn markers or eos
(``rlxf.envs.tokens``; other special tokens' texts stay text) or have a role not in ``ENV_ROLES``:
a model turn the model did not sample) ends that episode with ``episode["error"]`` set, naming the
class (counted in the step's metrics, written to samples.jsonl), its loss mask zeroed and its reward 0
(what it paid before it broke included), since an episode the environment broke carries no
signal about the policy; so does a chat template that refuses an observation, the first one
included (its ``raise_exception``, e.g. a tool message without a name, which a malformed tool
call has none of, or two user messages in a row). A chat template that cannot be appended to is a
configuration problem and stops the run (``TemplateAppendError``).

A thread stuck in a hung ``step`` cannot be killed; it is a daemon thread, abandoned, so it does
not keep the process alive. Its environment is closed by that thread if the call ever returns (a
constructor's or reset's included), never under the running call, so what a late call acquires
is released too. Environments that may hang for good should run their work in a subprocess they
can kill, on their own timeout.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from jinja2 import TemplateError

from rlxf.envs.base import ENV_ROLES, Env, EnvTask, StepResult
from rlxf.envs.tokens import ControlTextError, Conversation, TokenBoundaryError, TokenLimitError, text_problem
from rlxf.errors import raised_at
from rlxf.rollout import GenerationRequest, SamplingParams
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt, Trajectory

log = logging.getLogger("rlxf")

Credit = Literal["episode", "per_turn"]


@dataclass(frozen=True)
class EpisodeLimits:
    """When an episode stops, and where its rewards go (``env:`` config section)."""

    max_turns: int = 8                 # model turns per episode (``Conversation.model_turns``: what counts)
    max_total_tokens: int = 1024       # prompt + every turn, in tokens
    step_timeout_s: float = 30.0       # longest an environment's reset / step may take
    credit: Credit = "episode"         # episode return on the last model token, or each turn's reward on its own


@dataclass
class _Episode:
    prompt: Prompt
    group: int
    task: EnvTask
    env: Env | None = None
    conv: Conversation | None = None
    rewards: list[float] = field(default_factory=list)
    reward_at: list[int | None] = field(default_factory=list)  # response index of the model token each reward lands on
    infos: list[dict[str, Any]] = field(default_factory=list)
    end: str | None = None             # terminated | truncated | max_turns | max_total_tokens | error
    error: str | None = None
    final_observation: list[dict[str, Any]] = field(default_factory=list)
    busy: bool = False                 # a call into the environment (its constructor included) is running
    closing: bool = False              # the episode is over: close the environment once no call of it runs
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fail(self, reason: str) -> None:
        self.end, self.error = "error", reason
        warn_failed(self.task.uid, self.group, reason)

    def env_call(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """``fn``, a call into this episode's environment, for ``call_all``: running from now until
        it returns, so that an environment whose call outlives the timeout is closed by that call's
        thread once it returns, never under it (an environment keeps its state without locks) and
        never before what the late call acquires."""
        self.busy = True

        def call() -> Any:
            try:
                return fn()
            finally:
                with self.lock:
                    self.busy = False
                    late = self.closing
                if late and self.env is not None:
                    close_envs([self.env], timeout=None)
        return call

    def release(self) -> Env | None:
        """The episode is over: its environment to close now, or None (none was made, or a call of
        it still runs and closes it when it returns)."""
        with self.lock:
            self.closing = True
            return None if self.busy else self.env


def warn_failed(uid: str, group: int, reason: str) -> None:
    """The warning of an episode that ended in error (both the agent loop's and a program's)."""
    log.warning("episode %s (group %d) failed: %s", uid, group, reason)


def call_all(calls: list[Callable[[], Any]], timeout: float, what: str = "env.step_timeout_s") -> list[tuple[bool, Any]]:
    """Run the calls concurrently, each in a daemon thread; (True, value) or (False, why) each.

    All share one deadline: a step never takes longer than ``timeout`` however many episodes run.
    ``what`` names the limit in the message of a call that did not return.
    """
    late = f"did not return within {timeout:g} s ({what})"
    results: list[tuple[bool, Any]] = [(False, late)] * len(calls)

    def run(i: int, fn: Callable[[], Any]) -> None:
        results[i] = _outcome_of(fn)

    threads = [threading.Thread(target=run, args=(i, fn), daemon=True, name=f"rlxf-env-{i}")
               for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [r if not t.is_alive() else (False, late) for r, t in zip(results, threads)]


def _outcome_of(fn: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, fn()) or (False, why it raised)."""
    try:
        return True, fn()
    # any failure of user code ends only its episode, SystemExit included (a wrapped CLI's
    # sys.exit()); Ctrl-C reaches the main thread, never call_all's threads
    except BaseException as e:  # noqa: BLE001
        at = raised_at(e)   # the environment's (tool's, program's) line, not only the exception
        return False, f"{type(e).__name__}: {e}" + (f" (at {at})" if at else "")


def _check_messages(obs: Any, what: str, *, history: bool = False) -> str | None:
    """Why ``obs`` is not a list of chat messages an environment may return, or None.

    Every message has one of ``ENV_ROLES``. ``history``: a first observation, which may hold
    assistant messages before its last one (a few-shot conversation: environment tokens, loss_mask
    0); a step's may hold none."""
    if not isinstance(obs, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in obs):
        return f"{what} must be a list of {{'role': str, 'content': str}} messages, got {obs!r:.120}"
    roles = (*ENV_ROLES, "assistant") if history else ENV_ROLES
    for i, m in enumerate(obs):
        if m["role"] not in roles:
            few_shot = " (a first observation's also assistant, for few-shot examples)" if history else ""
            return (f"{what} message {i} has role {m['role']!r}; an environment's messages have the roles "
                    f"{', '.join(ENV_ROLES)}{few_shot}: any other may be templated as a model turn (Gemma's "
                    f"templates write the assistant's as 'model', ShareGPT-style ones as 'gpt'), which only the "
                    f"model writes; send the text as a user message")
        problem = text_problem(m["content"])
        if problem is not None:
            return f"{what} message {i} ({m['role']}): its content {problem}"
    if history and obs and obs[-1]["role"] not in ENV_ROLES:
        return f"{what} must end with a user / tool / system turn, not {obs[-1]['role']!r}"
    return None


def finite_reward(value: Any) -> float | None:
    """``value`` as a float when it is a finite real number (numpy scalars included), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        value = float(value)
    except OverflowError:   # an int past float's range
        return None
    return value if math.isfinite(value) else None


def _is_flag(value: Any) -> bool:
    """True, False, numpy's bools, or the integers 0 and 1."""
    return isinstance(value, (bool, np.bool_)) or isinstance(value, numbers.Integral) and value in (0, 1)


def info_problem(info: Any, what: str) -> str | None:
    """Why ``info`` (a step's, or an agent program's besides its reward) is not one rlxf can read,
    or None: a dict whose ``success`` (the episode's verdict: accuracy) is a flag or None, since
    "false" or "no" would read as true, and whose ``tool_errors`` (summed into
    env/tool_call_errors) is a count."""
    if not isinstance(info, dict):
        return f"{what} info {info!r:.80} ({type(info).__name__}); it must be a dict"
    success = info.get("success")
    if success is not None and not _is_flag(success):
        return (f"{what} info['success']={success!r:.80} ({type(success).__name__}); it must be True, False or "
                f"None (no verdict)")
    errors = info.get("tool_errors", 0)
    if isinstance(errors, bool) or not isinstance(errors, numbers.Integral) or errors < 0:
        return (f"{what} info['tool_errors']={errors!r:.80} ({type(errors).__name__}); it must be a count "
                f"(an integer >= 0); put messages under another key")
    return None


def _check_step(result: Any, env: str) -> str | None:
    """Why ``result`` of ``env``'s (its class name) step is not a valid ``StepResult``, or None."""
    what = f"{env}.step() returned"
    if not isinstance(result, StepResult):
        return f"{env}.step() must return rlxf.envs.StepResult, got {type(result).__name__}: {result!r:.120}"
    if finite_reward(result.reward) is None:
        return f"{what} reward {result.reward!r:.80} ({type(result.reward).__name__}); it must be a finite number"
    for name in ("terminated", "truncated"):
        flag = getattr(result, name)
        if not _is_flag(flag):
            return f"{what} {name}={flag!r:.80} ({type(flag).__name__}); it must be True or False"
    return info_problem(result.info, what) or _check_messages(result.observation, f"{env}.step() observation")


def episode_task(prompt: Prompt, seed: int) -> EnvTask:
    """The ``EnvTask`` of one episode of ``prompt``: its question before the chat template as the
    task's text (a record's own ``question`` field, else ``Prompt.question``; the templated text
    only for a prompt made without one). Given the templated text, an environment that starts its
    episode with it as a user message templated the prompt twice (since refused: the text holds
    the template's turn markers)."""
    question = prompt.metadata.get("question", prompt.question if prompt.question is not None else prompt.prompt_text)
    return EnvTask(uid=prompt.uid, prompt=str(question),
                   ground_truth=prompt.ground_truth, metadata=dict(prompt.metadata), seed=seed)


def _name(env: Env | None) -> str:
    """The environment's class, as errors name it."""
    return type(env).__qualname__ if env is not None else "the environment"


def _reset(make_env: Callable[[], Env], e: _Episode) -> list:
    """Make the episode's environment and reset it. The environment is the episode's as soon as it
    is made, so it is closed when its reset raises or hangs too (what its constructor started)."""
    e.env = make_env()
    return e.env.reset(e.task)


def run_episodes(engine, tokenizer, make_env: Callable[[], Env], prompts: list[Prompt], seeds: list[int],
                 sampling: SamplingParams, limits: EpisodeLimits, *, first_group: int = 0) -> list[Trajectory]:
    """``sampling.n`` episodes per prompt, as unscored trajectories (``group = first_group + i``).

    Each trajectory's ``reward`` is the episode return Σ_k r_k; ``episode`` holds the per-turn
    rewards, the end, the error if any, the environment's infos and the whole conversation.
    """
    episodes = [_Episode(prompt=p, group=first_group + i, task=episode_task(p, derive_seed(seed, j)))
                for i, (p, seed) in enumerate(zip(prompts, seeds, strict=True)) for j in range(sampling.n)]
    try:   # every environment made is closed, however the episodes end (a configuration error included)
        _reset_all(tokenizer, make_env, episodes, limits)
        for turn in range(limits.max_turns):
            live = [e for e in episodes if e.end is None]
            if not live:
                break
            _model_turns(engine, live, sampling, limits, turn)
            stepping = [e for e in live if e.end is None]
            outcomes = call_all([e.env_call(lambda e=e: e.env.step(e.conv.messages[-1]["content"]))
                                 for e in stepping], limits.step_timeout_s)
            for e, (ok, result) in zip(stepping, outcomes):
                _apply_step(e, ok, result, turn, limits)
    finally:
        close_envs([env for env in (e.release() for e in episodes) if env is not None], limits.step_timeout_s)
    return [_trajectory(e, tokenizer, limits.credit) for e in episodes]


def _reset_all(tokenizer, make_env: Callable[[], Env], episodes: list[_Episode], limits: EpisodeLimits) -> None:
    """Make and reset every episode's environment and start its conversation (or fail it)."""
    for e, (ok, first) in zip(episodes, call_all([e.env_call(lambda e=e: _reset(make_env, e)) for e in episodes],
                                                  limits.step_timeout_s)):
        if not ok:
            e.fail(f"reset: {first}")
            continue
        problem = _check_messages(first, f"{_name(e.env)}.reset() observation", history=True)
        if problem is not None:
            e.fail(problem)
            continue
        # an empty first observation: the data prompt as it is (single-turn tasks through this path)
        try:
            e.conv = (Conversation.start(tokenizer, first) if first
                      else Conversation.from_prompt(tokenizer, e.prompt.prompt_ids, e.prompt.prompt_text))
        except TemplateError as err:   # the template's raise_exception, e.g. roles that do not alternate
            e.fail(f"reset: the chat template refused the first observation: {err}")
            continue
        except ControlTextError as err:
            e.fail(f"reset: {_name(e.env)}.reset() observation: {err}")
            continue
        if len(e.conv.ids) >= limits.max_total_tokens:
            e.fail(f"the first observation has {len(e.conv.ids)} tokens, env.max_total_tokens is "
                   f"{limits.max_total_tokens}")


def close_envs(envs: list[Env], timeout: float | None) -> None:
    """Call each environment's optional ``close()`` once its episode is over (a process, a
    browser or a container it holds is released per episode, not at exit), its reset failed
    included. A close that raises or hangs is logged: the episode's result already stands.
    ``timeout`` None: close in this thread (one whose late call just returned, already abandoned)."""
    closing = [env for env in envs if callable(getattr(env, "close", None))]
    if timeout is None:
        outcomes = [_outcome_of(env.close) for env in closing]
    else:
        outcomes = call_all([env.close for env in closing], timeout)
    for env, (ok, why) in zip(closing, outcomes):
        if not ok:
            log.warning("environment %s: close() failed: %s", type(env).__name__, why)


def _model_turns(engine, live: list[_Episode], sampling: SamplingParams, limits: EpisodeLimits, turn: int) -> None:
    """Sample every live episode's next turn; episodes with the same token budget share a call."""
    by_budget: dict[int, list[_Episode]] = {}
    for e in live:
        budget = min(sampling.max_new_tokens, limits.max_total_tokens - len(e.conv.ids))
        by_budget.setdefault(budget, []).append(e)
    for budget, batch in by_budget.items():
        requests = [GenerationRequest(e.conv.ids, seed=derive_seed(e.task.seed, turn)) for e in batch]
        results = engine.generate(requests, replace(sampling, n=1, max_new_tokens=budget))
        for e, (c,) in zip(batch, results, strict=True):
            if c.finish_reason == "error":
                e.fail(f"engine: {c.error}")
                continue
            e.conv.add_model_turn(list(c.response_ids), list(c.logprobs), c.versions(),
                                  stopped=c.finish_reason == "stop")


def _apply_step(e: _Episode, ok: bool, result: Any, turn: int, limits: EpisodeLimits) -> None:
    if not ok:
        e.fail(f"step {turn}: {result}")
        return
    problem = _check_step(result, _name(e.env))
    if problem is not None:
        e.fail(f"step {turn}: {problem}")
        return
    last_model = max((i for i, m in enumerate(e.conv.loss_mask) if m), default=None)
    e.rewards.append(finite_reward(result.reward))
    e.reward_at.append(last_model)
    e.infos.append(dict(result.info))
    if result.terminated or result.truncated:
        e.end = "terminated" if result.terminated else "truncated"
        e.final_observation = list(result.observation)
        return
    if turn == limits.max_turns - 1:
        e.end, e.final_observation = "max_turns", list(result.observation)
        return
    try:   # room for at least one more model token, or the observation ends the episode unappended
        e.conv.add_messages(result.observation, max_len=limits.max_total_tokens - 1)
    except TokenLimitError:
        e.end, e.final_observation = "max_total_tokens", list(result.observation)
    except TokenBoundaryError as err:
        e.fail(f"step {turn}: {err}")
    except ControlTextError as err:
        e.fail(f"step {turn}: {_name(e.env)}.step() observation: {err}")
    except TemplateError as err:   # the template's raise_exception, e.g. a tool message without a name
        e.fail(f"step {turn}: the chat template refused the observation: {err}")


def _trajectory(e: _Episode, tokenizer, credit: Credit) -> Trajectory:
    info = {"turns": e.conv.model_turns if e.conv is not None else 0, "turn_rewards": list(e.rewards), "end": e.end,
            "error": e.error, "infos": e.infos, "final_observation": e.final_observation}
    return conversation_trajectory(e.conv, e.prompt, e.group, tokenizer, rewards=e.rewards, reward_at=e.reward_at,
                                   credit=credit, failed=e.end == "error", episode=info)


def conversation_trajectory(conv: Conversation | None, prompt: Prompt, group: int, tokenizer, *,
                            rewards: list[float], reward_at: list[int | None], credit: Credit, failed: bool,
                            episode: dict[str, Any]) -> Trajectory:
    """The trajectory of one recorded conversation (the agent loop's, or the chat endpoint's).

    ``prompt`` becomes the first observation's ids; ``rewards[k]`` lands on response index
    ``reward_at[k]`` under per-turn credit (None: the first model token, when there is one). A
    failed episode keeps its tokens with loss_mask 0 and its rewards become 0
    (``episode["turn_rewards"]`` too): a broken episode says nothing about the policy, whatever it
    paid before it broke. ``episode`` gains the conversation's messages (and its tools, where it
    was given some).
    """
    if failed:
        rewards = [0.0] * len(rewards)
        episode = {**episode, "turn_rewards": list(rewards)}
    ids = conv.response_ids if conv is not None else []
    mask = [0] * len(ids) if failed or conv is None else list(conv.loss_mask)
    token_rewards = None
    if credit == "per_turn" and conv is not None:
        token_rewards = [0.0] * len(ids)
        # a reward with no model token before it (a first turn of no tokens) lands on the first
        # one after it, so the token rewards still sum to the return
        first = next((i for i, m in enumerate(conv.loss_mask) if m), None)
        for r, at in zip(rewards, reward_at):
            at = first if at is None else at
            if at is not None:
                token_rewards[at] += r
    last = conv.messages[-1] if conv is not None and conv.messages else {}
    final_text = last.get("content", "") if last.get("role") == "assistant" else ""
    end = episode.get("end")
    finish = "error" if failed else "stop" if end == "terminated" else "length"
    if conv is not None:
        prompt = Prompt(uid=prompt.uid, prompt_ids=conv.ids[:conv.prompt_len],
                        prompt_text=tokenizer.decode(conv.ids[:conv.prompt_len]), ground_truth=prompt.ground_truth,
                        metadata=prompt.metadata, question=prompt.question)
    return Trajectory(
        prompt=prompt, group=group, response_ids=list(ids), response_text=final_text,
        rollout_logprobs=list(conv.logprobs) if conv is not None else [], loss_mask=mask,
        policy_versions=list(conv.versions) if conv is not None else [], finish_reason=finish,
        reward=sum(rewards), token_rewards=token_rewards,
        episode=_json_safe({**episode, "messages": conv.messages if conv is not None else [],
                            **({"tools": conv.tools} if conv is not None and conv.tools else {})}),
    )


# how an episode ends (``episode["end"]``): the environment said so (``terminated``, solved or lost;
# ``truncated``, a limit it keeps), env.max_turns, env.max_total_tokens, or an error of the
# environment, its tools, an agent program or the engine
ENDS = ("terminated", "truncated", "max_turns", "max_total_tokens", "error")


def turn_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """``env/turns_mean``; ``env/turn_reward/K``: the mean reward of turn K (1-based) over the
    episodes that played it, i.e. where in an episode its return is earned (the report plots it);
    ``env/end/E``: the share of episodes that ended by E (``ENDS``; the shares sum to 1), e.g. how
    many a turn or token limit cuts off before the environment is done."""
    by_turn: dict[int, list[float]] = {}
    for t in trajs:
        for k, r in enumerate(t.episode["turn_rewards"], start=1):
            by_turn.setdefault(k, []).append(r)
    out = {"env/turns_mean": sum(t.episode["turns"] for t in trajs) / max(1, len(trajs))}
    out |= {f"env/turn_reward/{k}": sum(rs) / len(rs) for k, rs in sorted(by_turn.items())}
    if trajs:
        ends = [t.episode["end"] for t in trajs]
        out |= {f"env/end/{end}": ends.count(end) / len(ends) for end in ENDS}
    return out


def _json_safe(value: Any, _path: tuple[int, ...] = ()) -> Any:
    """``value`` as plain JSON values: an environment's info (or a program's) may hold anything,
    and samples.jsonl must neither break nor stop the run. Numpy scalars and arrays become their
    Python values; non-finite floats become strings, as in metrics.jsonl (a tool call's arguments
    may hold ``NaN``); keys become strings; other objects, and a container holding itself, their
    ``repr``."""
    if isinstance(value, np.generic):   # a numpy scalar: its Python value, not its repr ("np.False_" reads true)
        value = value.item()
    elif isinstance(value, np.ndarray) and value.size <= 1000:   # a larger one: numpy's summary (its repr)
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, (dict, list, tuple)):
        if id(value) in _path:
            return f"<circular {type(value).__name__}>"
        path = (*_path, id(value))
        if isinstance(value, dict):
            return {_json_key(k): _json_safe(v, path) for k, v in value.items()}
        return [_json_safe(v, path) for v in value]
    return repr(value)


def _json_key(key: Any) -> str:
    """A dict key as JSON's string key: numbers (numpy's too) and None as JSON writes them."""
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, str):
        return key
    return json.dumps(key) if isinstance(key, (int, float, bool)) or key is None else repr(key)

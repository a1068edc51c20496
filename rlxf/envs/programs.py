"""Agent programs drive rollouts: rlxf serves the policy, the program runs the episode.

    # my_agent.py -- knows nothing of rlxf but the task it gets
    from openai import OpenAI

    def run(base_url, task):
        client = OpenAI(base_url=base_url, api_key="rlxf")
        messages = [{"role": "user", "content": task.prompt}]
        reply = client.chat.completions.create(model="rlxf-policy", messages=messages)
        ...                                         # tools, more turns, whatever the program does
        return 1.0 if solved else 0.0

    # config:  env: {agent: my_agent:run}   or   env: {agent_command: [python, my_agent.py]}

This is the server-based rollout of AReaL and slime: during ``generate`` an OpenAI-compatible
endpoint (``rlxf.envs.chat_server``) runs on loopback, and each episode gets its own base URL
(``.../episodes/ID/v1``), so a program needs no rlxf-specific field to say which episode it is
in. The endpoint appends every request to the episode's token sequence exactly as the built-in
agent loop does (model tokens: the engine's ids, log-probs and version, loss_mask 1; everything
else through the chat template, loss_mask 0) and samples each turn with the rollout's parameters
and the built-in loop's seeds, so for the same seeded episode both paths give the same
trajectory. The program's return value is the episode's reward (on the last model token).
Requests may carry ``tools``, ``stream: true`` and ``logprobs: true``; what the endpoint could not
record as asked (``n > 1``, penalties, a forced tool call, ...) is a 400 saying why
(``rlxf.envs.chat_protocol``).

Episodes run concurrently, one thread each (a command: one process each, in a process group of
its own that is killed when the run of the episode ends, at the timeout or not, so what the
command started dies with it). A program that raises, exits nonzero, hangs past
``env.agent_timeout_s``, returns something that is not a reward, or never calls the model ends
its own episode with ``episode["error"]``, loss_mask 0 and reward 0, as a broken environment does,
with a warning; the run goes on. So does an episode whose turn the engine could not sample, whatever
the program made of the error reply it got. A program whose request is refused because the episode reached
``env.max_turns`` / ``env.max_total_tokens`` may fail on that refusal: its episode then ends for
that limit, with reward 0, and trains (what the refused request sent is not recorded).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from rlxf.envs.agent import (
    EpisodeLimits,
    call_all,
    conversation_trajectory,
    episode_task,
    finite_reward,
    info_problem,
    warn_failed,
)
from rlxf.envs.base import EnvError, EnvTask, import_object
from rlxf.envs.chat_server import ChatServer, EpisodeRecorder
from rlxf.rollout import SamplingParams
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt, Trajectory

AgentFunction = Callable[[str, EnvTask], Any]   # (base_url, task) -> reward | {"reward": ..., ...}


class CommandAgent:
    """An agent program run as ``command`` once per episode (see ``EnvConfig.agent_command``).

    Each run is a session of its own (``start_new_session``), and its whole process group is
    killed when the run ends, by timeout, error or success, and on ``close``: a wrapper script's
    children die with it instead of outliving the run (killing only the direct child would leave
    them running)."""

    def __init__(self, command: list[str], timeout_s: float):
        self.command, self.timeout_s = list(command), timeout_s
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def __call__(self, base_url: str, task: EnvTask) -> Any:
        command = self.command
        env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "rlxf",
               "RLXF_TASK": json.dumps(asdict(task), default=repr)}
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        with self._lock:
            self._running.add(proc)
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{command[0]} did not return within {self.timeout_s:g} s "
                               f"(env.agent_timeout_s)") from None
        finally:
            _kill_group(proc)
            with self._lock:
                self._running.discard(proc)
            if proc.returncode is None:   # timed out (or interrupted): reap it, its pipes at EOF now
                try:
                    proc.communicate(timeout=5)
                except subprocess.TimeoutExpired:   # a process that left the group holds a pipe
                    proc.wait()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited with {proc.returncode}: {stderr.strip()[-300:]}")
        lines = stdout.strip().splitlines()
        if not lines:
            raise ValueError(f"{' '.join(command)} printed nothing; its last stdout line must be the reward")
        try:
            return json.loads(lines[-1])
        except ValueError:
            raise ValueError(f"the last stdout line of {' '.join(command)} is {lines[-1][:80]!r}, not a reward "
                             f"(a number or a JSON object)") from None

    def close(self) -> None:
        """Kill the process groups of the runs still going (their episodes were abandoned); each
        run's own thread then reaps its process."""
        with self._lock:
            running = list(self._running)
        for proc in running:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (its own: started with ``start_new_session``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):   # the group is gone already
        pass


def command_agent(command: list[str], timeout_s: float) -> CommandAgent:
    """An agent program run as ``command`` once per episode (see ``CommandAgent``)."""
    return CommandAgent(command, timeout_s)


def load_agent(agent: str | None, command: list[str] | None, timeout_s: float) -> AgentFunction:
    """The configured agent program as one callable ``(base_url, task) -> reward``."""
    if command:
        return command_agent(command, timeout_s)
    assert agent is not None
    fn = import_object(agent, "agent program", "env.agent")
    if not callable(fn):
        raise EnvError(f"env.agent={agent!r} is not callable (got {type(fn).__name__})")
    return fn


def _outcome(value: Any) -> tuple[float, dict[str, Any]] | str:
    """(reward, info) from what a program returned, or why it is not a reward."""
    info: dict[str, Any] = {}
    if isinstance(value, dict):
        info = {k: v for k, v in value.items() if k != "reward"}
        value = value.get("reward")
    reward = finite_reward(value)
    if reward is None:
        return f"the agent program returned {value!r:.80}; it must return a finite reward (or {{'reward': ...}})"
    return info_problem(info, "the agent program returned") or (reward, info)


class ProgramEpisodes:
    """Runs the configured agent program's episodes against an engine, served on loopback."""

    def __init__(self, agent: AgentFunction, engine, tokenizer, limits: EpisodeLimits, timeout_s: float):
        self.agent, self.tokenizer, self.limits, self.timeout_s = agent, tokenizer, limits, timeout_s
        self.recorder = EpisodeRecorder(engine, tokenizer, max_total_tokens=limits.max_total_tokens,
                                        max_turns=limits.max_turns, only_opened=True)
        self._server: ChatServer | None = None
        self._calls = 0
        self._running = threading.Lock()
        self._closed = False
        self._serving = threading.Lock()   # the endpoint is started, or closed, by one thread at a time

    def run(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
            first_group: int = 0) -> list[Trajectory]:
        """``sampling.n`` episodes per prompt, as the agent loop's ``run_episodes`` makes them.
        Calls from several threads (async mode's episodes, an evaluation) take turns: the
        endpoint samples every turn with one call's sampling parameters."""
        with self._running:
            if self._closed:   # a call that waited its turn while the run ended starts no endpoint again
                raise EnvError("the agent programs were closed (the run is ending); no episode is started")
            return self._run(prompts, seeds, sampling, first_group)

    def _run(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams,
             first_group: int) -> list[Trajectory]:
        with self._serving:   # a run that took its turn just before the close starts no endpoint after it
            if self._closed:
                raise EnvError("the agent programs were closed (the run is ending); no episode is started")
            if self._server is None:   # started on first use: constructing the rollout serves nothing yet
                self._server = ChatServer(self.recorder)
        self.recorder.sampling = sampling
        self._calls += 1
        episodes = []
        for i, (p, seed) in enumerate(zip(prompts, seeds, strict=True)):
            for j in range(sampling.n):
                name = f"c{self._calls}-g{first_group + i}-e{j}"
                task = episode_task(p, derive_seed(seed, j))
                self.recorder.open(name, task.seed)
                episodes.append((name, p, first_group + i, task))
        outcomes = call_all([lambda n=n, t=t: self.agent(self._server.episode_url(n), t)
                             for n, _, _, t in episodes], self.timeout_s, what="env.agent_timeout_s")
        trajs = []
        for (name, prompt, group, _), (ok, value) in zip(episodes, outcomes):
            ended = self.recorder.ended.get(name)
            failed = self.recorder.failed.get(name)
            conv = self.recorder.take(name)
            reward, info, error = 0.0, {}, None
            if failed is not None:   # whatever the program did with the failed request
                error = failed
            elif ok:
                got = _outcome(value)
                if isinstance(got, str):
                    error = got
                else:
                    reward, info = got
            elif ended is None:
                error = f"agent program: {value}"
            if conv is None and error is None:
                error = ("the agent program made no model call" if ended is None else
                         f"the agent program's first request was refused (env.{ended}); nothing was recorded")
            if error is not None:   # a broken episode says nothing about the policy
                reward, info = 0.0, {}
                warn_failed(prompt.uid, group, error)
            end = "error" if error else ended or "terminated"
            last_model = max((k for k, m in enumerate(conv.loss_mask) if m), default=None) if conv else None
            trajs.append(conversation_trajectory(
                conv, prompt, group, self.tokenizer, rewards=[reward], reward_at=[last_model],
                credit=self.limits.credit, failed=error is not None,
                episode={"turns": conv.model_turns if conv else 0, "turn_rewards": [reward], "end": end,
                         "error": error, "infos": [info]}))
        return trajs

    def close(self) -> None:
        with self._serving:
            self._closed = True
            server, self._server = self._server, None
        if isinstance(self.agent, CommandAgent):
            self.agent.close()
        if server is not None:
            server.close()

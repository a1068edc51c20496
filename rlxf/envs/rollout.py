"""``Rollout`` over environments: what the placements use when ``env:`` is configured.

``generate`` runs episodes instead of single responses: of an environment through the agent loop
(``rlxf.envs.agent``), or of an agent program through the chat endpoint (``rlxf.envs.programs``).
``score`` turns each episode's return into its reward, adding the ``reward:`` verifiers' score of
the last model turn when ``env.use_verifiers`` is set. The loop and ``collect`` see ordinary
trajectories. The local placement and Ray's colocated actor hold one ``EnvRollout``; under Ray's
disaggregated mode each engine actor generates with its own and the driver scores with
``score_episodes``.

``rollout.mode: async`` under ``local`` streams episodes through ``EpisodeStream``: each set of
groups submitted runs its episodes in a thread of its own while the trainer trains, against the
engine process (``rlxf.rollout.process``), which decodes the model turns of every such thread
together and loads new weights between decode steps. An episode's turns may so be sampled under
several versions of the weights; each token carries its own, and the staleness bound counts
the oldest.
"""

from __future__ import annotations

import inspect
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from rlxf.config.env import EnvConfig
from rlxf.envs.agent import EpisodeLimits, close_envs, run_episodes
from rlxf.envs.base import EnvError, build_env, env_factory
from rlxf.envs.programs import ProgramEpisodes, load_agent
from rlxf.envs.tools import ToolSet
from rlxf.rewards.types import RewardInput, batch_metrics
from rlxf.rollout import SamplingParams
from rlxf.rollout.stream import GroupRequest, GroupStream, engine_process_stats
from rlxf.types import Prompt, Trajectory


class EnvRollout:
    """Episodes of the configured environment or agent program, sampled from ``engine``.

    ``reward``: the verifiers, needed only to score with ``env.use_verifiers``; a rollout that only
    generates (a Ray engine actor) is built with ``generate_only``."""

    def __init__(self, cfg: EnvConfig, engine, tokenizer, reward=None, *, generate_only: bool = False):
        self.engine, self.tokenizer, self.reward = engine, tokenizer, reward
        self.use_verifiers = cfg.use_verifiers
        if cfg.use_verifiers and reward is None and not generate_only:
            raise EnvError("env.use_verifiers is true but no reward function is configured")
        self.limits = EpisodeLimits(max_turns=cfg.max_turns, max_total_tokens=cfg.max_total_tokens,
                                    step_timeout_s=cfg.step_timeout_s, credit=cfg.credit)
        self.tools = ToolSet(cfg.tools, cfg.tool_description) if cfg.tools else None
        self.programs: ProgramEpisodes | None = None
        self._background: list[threading.Thread] = []   # episodes of ``EpisodeStream``, in threads of their own
        if cfg.name is None:   # an agent program runs the episodes
            agent = load_agent(cfg.agent, cfg.agent_command, cfg.agent_timeout_s)
            self.programs = ProgramEpisodes(agent, engine, tokenizer, self.limits, cfg.agent_timeout_s)
            return
        options = dict(cfg.options)
        if self.tools is not None:
            params = inspect.signature(env_factory(cfg.name)).parameters
            if "tools" not in params:
                raise EnvError(f"env.tools is set but environment {cfg.name!r} takes no tools")
            options["tools"] = self.tools
        self.make_env = partial(build_env, cfg.name, options)
        # bad names and options fail here, before any rollout; what the probe holds is released
        close_envs([self.make_env()], cfg.step_timeout_s)

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        if self.programs is not None:
            return self.programs.run(prompts, seeds, sampling, first_group=first_group)
        return run_episodes(self.engine, self.tokenizer, self.make_env, prompts, seeds, sampling, self.limits,
                            first_group=first_group)

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        return score_episodes(trajs, max_new_tokens, self.reward if self.use_verifiers else None)

    def in_background(self, target: Callable[..., None], *args: Any) -> None:
        """Run ``target(*args)`` in a thread of its own (``EpisodeStream``); ``close`` ends it."""
        thread = threading.Thread(target=target, args=args, name="rlxf-episodes", daemon=True)
        self._background = [t for t in self._background if t.is_alive()] + [thread]
        thread.start()

    def close(self) -> None:
        """Episodes still running in the background (async mode's, at the end of a run) wait on the
        engine: it is closed first (its owner's close after is a no-op), so they end now, and each
        has closed its environments before this returns: the process may exit right after, and a
        daemon thread's ``env.close()`` would not finish. Their tools are closed after them."""
        running = [t for t in self._background if t.is_alive()]
        if self.programs is not None:   # a program's model calls fail from here, and no waiting run starts
            self.programs.close()
        if running:
            self.engine.close()
            for thread in running:
                thread.join()
        if self.tools is not None:
            self.tools.close()


class EpisodeStream(GroupStream):
    """``rollout.mode: async`` with ``env:``: the groups of each ``submit`` run their episodes in a
    thread of their own (``EnvRollout.generate``), against an engine that decodes on its own and
    may be called from several threads (``EngineProcess``); ``ready`` hands back the groups of
    every such call that has finished. A call that raised (the engine lost for good, a chat
    template that cannot be appended to) raises in ``ready``, in the trainer's thread."""

    def __init__(self, rollout: EnvRollout):
        self.rollout = rollout
        self.finished: queue.SimpleQueue = queue.SimpleQueue()

    def submit(self, requests: list[GroupRequest], sampling: SamplingParams) -> None:
        if requests:
            self.rollout.in_background(self._run, list(requests), sampling)

    def _run(self, requests: list[GroupRequest], sampling: SamplingParams) -> None:
        try:
            trajs = self.rollout.generate([r.prompt for r in requests], [r.seed for r in requests], sampling)
        except BaseException as e:  # noqa: BLE001 - raised again in the trainer's thread by ready
            self.finished.put(e)
            return
        groups: list[list[Trajectory]] = [[] for _ in requests]
        for t in trajs:   # numbered by position in the call; give back the callers' ids
            groups[t.group].append(t)
            t.group = requests[t.group].group
        self.finished.put([(r.group, g) for r, g in zip(requests, groups)])

    def ready(self, timeout: float | None = None) -> list[tuple[int, list[Trajectory]]]:
        try:
            calls = [self.finished.get(timeout=timeout) if timeout != 0 else self.finished.get_nowait()]
        except queue.Empty:
            return []
        while True:   # and every other call that has finished by now
            try:
                calls.append(self.finished.get_nowait())
            except queue.Empty:
                break
        out: list[tuple[int, list[Trajectory]]] = []
        for call in calls:
            if isinstance(call, BaseException):
                raise call
            out += call
        return out

    def engine_stats(self) -> dict[str, float]:
        engine = self.rollout.engine
        return engine_process_stats(engine) if hasattr(engine, "idle_seconds") else {}


def score_episodes(trajs: list[Trajectory], max_new_tokens: int, reward=None) -> dict[str, float]:
    """Reward = episode return (+ the ``reward`` verifiers' score of the last model turn, when
    given); correct = the episode's last ``info["success"]`` where it says, else the verifiers'
    verdict. An episode that ended in error has reward 0 (``conversation_trajectory``) and correct
    None, whatever it paid or said before it broke. Returns the step's episode metrics (errors,
    timeouts, tool errors, per-turn reward)."""
    metrics: dict[str, float] = {}
    verdicts: list[Any] = [None] * len(trajs)
    if reward is not None:
        inputs = [RewardInput(prompt=t.prompt.prompt_text, response=t.response_text,
                              ground_truth=t.prompt.ground_truth,
                              metadata={**t.prompt.metadata, "conversation": t.episode["messages"]},
                              response_tokens=t.longest_turn, max_new_tokens=max_new_tokens,
                              uid=t.prompt.uid) for t in trajs]
        scored = reward.score(inputs)
        metrics |= batch_metrics(scored)
        for i, (t, s) in enumerate(zip(trajs, scored)):
            t.scores, t.reward_error, verdicts[i] = dict(s.scores), s.error, s.correct
            if t.loss_mask and any(t.loss_mask):
                t.reward += s.reward
                if t.token_rewards is not None:  # the verifier judges the final answer: its last model token
                    last = max(i for i, m in enumerate(t.loss_mask) if m)
                    t.token_rewards[last] += s.reward
    for t, verdict in zip(trajs, verdicts):
        ep = t.episode
        t.scores["env"] = float(sum(ep["turn_rewards"]))
        success = next((info["success"] for info in reversed(ep["infos"]) if "success" in info), None)
        t.correct = None if ep["end"] == "error" else bool(success) if success is not None else verdict
    tool_errors = sum(info.get("tool_errors", 0) for t in trajs for info in t.episode["infos"])
    timeouts = sum(1 for t in trajs if "did not return within" in (t.episode["error"] or ""))
    metrics |= {
        # keys ending in errors / timeouts are summed over sampling rounds by collect
        "env/episode_errors": float(sum(t.episode["end"] == "error" for t in trajs)),
        "env/step_timeouts": float(timeouts),
        "env/tool_call_errors": float(tool_errors),
    }
    return metrics


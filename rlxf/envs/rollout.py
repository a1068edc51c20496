"""``Rollout`` over environments: what the local placement uses when ``env:`` is configured.

``generate`` runs episodes (``rlxf.envs.agent``) instead of single responses, and ``score`` turns
each episode's return into its reward, adding the ``reward:`` verifiers' score of the last model
turn when ``env.use_verifiers`` is set. The loop and ``collect`` see ordinary trajectories.
"""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any

from rlxf.config.env import EnvConfig
from rlxf.envs.agent import EpisodeLimits, run_episodes
from rlxf.envs.base import EnvError, build_env, env_factory
from rlxf.envs.tools import ToolSet
from rlxf.rewards.types import RewardInput, batch_metrics
from rlxf.rollout import SamplingParams
from rlxf.types import Prompt, Trajectory


class EnvRollout:
    """Episodes of one configured environment, sampled from ``engine``."""

    def __init__(self, cfg: EnvConfig, engine, tokenizer, reward=None):
        self.engine, self.tokenizer, self.reward = engine, tokenizer, reward
        self.use_verifiers = cfg.use_verifiers
        if cfg.use_verifiers and reward is None:
            raise EnvError("env.use_verifiers is true but no reward function is configured")
        self.limits = EpisodeLimits(max_turns=cfg.max_turns, max_total_tokens=cfg.max_total_tokens,
                                    step_timeout_s=cfg.step_timeout_s, credit=cfg.credit)
        self.tools = ToolSet(cfg.tools) if cfg.tools else None
        options = dict(cfg.options)
        if self.tools is not None:
            params = inspect.signature(env_factory(cfg.name)).parameters
            if "tools" not in params:
                raise EnvError(f"env.tools is set but environment {cfg.name!r} takes no tools")
            options["tools"] = self.tools
        self.make_env = partial(build_env, cfg.name, options)
        self.make_env()   # bad names and options fail here, before any rollout

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        return run_episodes(self.engine, self.tokenizer, self.make_env, prompts, seeds, sampling, self.limits,
                            first_group=first_group)

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        """Reward = episode return (+ verifiers); correct = the environment's last ``info["success"]``
        where it says, else the verifiers' verdict."""
        metrics: dict[str, float] = {}
        verdicts: list[Any] = [None] * len(trajs)
        if self.use_verifiers:
            inputs = [RewardInput(prompt=t.prompt.prompt_text, response=t.response_text,
                                  ground_truth=t.prompt.ground_truth,
                                  metadata={**t.prompt.metadata, "conversation": t.episode["messages"]},
                                  response_tokens=len(t.response_ids), max_new_tokens=max_new_tokens,
                                  uid=t.prompt.uid) for t in trajs]
            scored = self.reward.score(inputs)
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
            t.correct = bool(success) if success is not None else verdict
        tool_errors = sum(info.get("tool_errors", 0) for t in trajs for info in t.episode["infos"])
        timeouts = sum(1 for t in trajs if "did not return within" in (t.episode["error"] or ""))
        metrics |= {
            # keys ending in errors / timeouts are summed over sampling rounds by collect
            "env/episode_errors": float(sum(t.episode["end"] == "error" for t in trajs)),
            "env/step_timeouts": float(timeouts),
            "env/tool_call_errors": float(tool_errors),
        }
        return metrics

    def close(self) -> None:
        if self.tools is not None:
            self.tools.close()

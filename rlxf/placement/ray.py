"""The Ray placement: the roles of an RL run as Ray actors (``run.placement: ray``).

    colocated       one actor holds learner, engine and reward (a ``LocalPlacement``) and runs
                    every phase in turn, in its own process with its own CPUs/GPUs
    disaggregated   a learner actor (actor, reference, critic, optimizers) and ``ray.engines``
                    engine actors, each with its own copy of the policy; the driver scores with
                    the reward (whose verifiers run in their own worker pool) and, after each
                    step, ships the learner's weights to every engine through the object store

Checkpoints have the same layout as ``local`` (the learner writes them), so a run resumes under
either placement. A dead engine actor (killed, OOM, node lost) is replaced, given the current
weights, and its requests are retried, up to ``ray.max_restarts`` times; a dead learner ends
the run with ``LearnerLost`` (resume from the last checkpoint). Ray is imported only here.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from rlxf.config import Config
from rlxf.placement.base import LearnerLost, Placement
from rlxf.rollout import SamplingParams
from rlxf.types import Experience, Prompt, Trajectory

if TYPE_CHECKING:
    from rlxf.data import SFTExample

log = logging.getLogger("rlxf")

_ACTOR_LOST = (RayActorError, ActorDiedError, ActorUnavailableError)


def _threads(cpus: float, seed: int) -> None:
    """An actor's torch threads (its reserved CPUs) and initialisation seed (as run_training's)."""
    import torch

    torch.set_num_threads(max(1, int(cpus)))
    torch.manual_seed(seed)


class _Colocated:
    """A whole ``LocalPlacement`` inside one actor."""

    def __init__(self, cfg: Config, cpus: float):
        from rlxf.placement.local import LocalPlacement

        _threads(cpus, cfg.seeds.init)
        self.placement = LocalPlacement.from_config(cfg)

    def call(self, method: str, *args, **kwargs):
        return getattr(self.placement, method)(*args, **kwargs)

    def score(self, trajs: list[Trajectory], max_new_tokens: int):
        """Score here; the verdicts go back to the driver's copies of the trajectories."""
        metrics = self.placement.score(trajs, max_new_tokens)
        return [(t.reward, t.scores, t.correct, t.reward_error) for t in trajs], metrics


class _Learner:
    """The learner (actor, reference, critic and the algorithm's state) inside an actor."""

    def __init__(self, cfg: Config, cpus: float):
        from rlxf.models import load_from_config
        from rlxf.placement.local import build_learner

        _threads(cpus, cfg.seeds.init)
        model, tokenizer = load_from_config(cfg.model)
        self.learner = build_learner(cfg, model, tokenizer)

    def call(self, method: str, *args, **kwargs):
        return getattr(self.learner, method)(*args, **kwargs)

    def weights(self) -> dict[str, Any]:
        """The actor's weights as plain CPU tensors (merged when LoRA trains), for the engines."""
        from rlxf.models.loading import merged_state_dict

        return {k: v.detach().cpu() for k, v in merged_state_dict(self.learner.actor.model).items()}


class _Engine:
    """One rollout engine replica with its own copy of the policy."""

    def __init__(self, cfg: Config, cpus: float):
        from rlxf.models import load_from_config
        from rlxf.rollout import build_engine_from_config
        from rlxf.trainer.collect import EngineRollout

        _threads(cpus, cfg.seeds.init)
        model, tokenizer = load_from_config(cfg.model.model_copy(update={"lora": None}))
        model.eval()
        engine = build_engine_from_config(cfg.rollout, model, tokenizer, seed=cfg.seeds.sampling)
        self.rollout = EngineRollout(engine, tokenizer, reward=None)

    def generate(self, prompts, seeds, sampling, first_group):
        return self.rollout.generate(prompts, seeds, sampling, first_group=first_group)

    def update_weights(self, weights: dict[str, Any], version: int) -> int:
        self.rollout.engine.update_weights(weights.items(), version=version)
        return version


class RayPlacement(Placement):
    """Roles as Ray actors; see the module docstring for the two modes."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        rc = cfg.ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(address=rc.address, include_dashboard=False)
        # actors on this machine import what the driver imports (rlxf, plugins next to the config);
        # on a cluster, ship code with the cluster's own means (an installed package, working_dir)
        self._options = {"runtime_env": {"env_vars": {"PYTHONPATH": _pythonpath()}}} if rc.address is None else {}
        self.restarts = 0
        self._version = 0
        self._weights_ref = None
        self._colocated = None
        self._learner = None
        self._engines: list[Any] = []
        self.reward = None
        from rlxf.models import load_tokenizer

        self.tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.path, chat_template=cfg.model.chat_template,
                                        revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code)
        if rc.mode == "colocated":
            self._colocated = ray.remote(_Colocated).options(
                num_cpus=rc.learner_cpus, num_gpus=rc.learner_gpus, **self._options).remote(cfg, rc.learner_cpus)
            ray.get(self._colocated.call.remote("sync_weights", 0))
        else:
            from rlxf.rewards import build_run_reward

            self._learner = ray.remote(_Learner).options(
                num_cpus=rc.learner_cpus, num_gpus=rc.learner_gpus, **self._options).remote(cfg, rc.learner_cpus)
            self._engines = [self._new_engine() for _ in range(rc.engines)]
            self.reward = build_run_reward(cfg)
            self.sync_weights(0)

    # -- placement interface --------------------------------------------------------------

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        if self._colocated is not None:
            return ray.get(self._colocated.call.remote("generate", prompts, seeds, sampling, first_group=first_group))
        # contiguous shares, so group numbering and order are those of one engine
        k = len(self._engines)
        bounds = [len(prompts) * i // k for i in range(k + 1)]
        shares = [(bounds[i], bounds[i + 1]) for i in range(k) if bounds[i + 1] > bounds[i]]
        out: list[list[Trajectory] | None] = [None] * len(shares)
        pending = {i: self._engines[i].generate.remote(prompts[a:b], seeds[a:b], sampling, first_group + a)
                   for i, (a, b) in enumerate(shares)}
        while pending:
            for i, ref in list(pending.items()):
                try:
                    out[i] = ray.get(ref)
                    del pending[i]
                except _ACTOR_LOST as e:
                    self._replace_engine(i, e)
                    a, b = shares[i]
                    pending[i] = self._engines[i].generate.remote(prompts[a:b], seeds[a:b], sampling, first_group + a)
        return [t for part in out for t in part]

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        if self._colocated is not None:
            verdicts, metrics = ray.get(self._colocated.score.remote(trajs, max_new_tokens))
            for t, (reward, scores, correct, error) in zip(trajs, verdicts):
                t.reward, t.scores, t.correct, t.reward_error = reward, scores, correct, error
            return metrics
        from rlxf.trainer.collect import score

        return score(self.reward, trajs, max_new_tokens)

    def make_experience(self, trajs: list[Trajectory]) -> tuple[Experience, dict[str, float]]:
        return self._on_learner("make_experience", trajs)

    def update(self, exp: Experience, step: int, demos: list[list[SFTExample]] | None = None) -> dict[str, float]:
        return self._on_learner("update", exp, step, demos)

    def sync_weights(self, version: int) -> None:
        self._version = version
        if self._colocated is not None:
            ray.get(self._colocated.call.remote("sync_weights", version))
            return
        try:
            self._weights_ref = self._learner.weights.remote()
            ray.wait([self._weights_ref])
        except _ACTOR_LOST as e:
            raise self._learner_lost(e) from None
        for i in range(len(self._engines)):
            while True:
                try:
                    ray.get(self._engines[i].update_weights.remote(self._weights_ref, version))
                    break
                except _ACTOR_LOST as e:
                    self._replace_engine(i, e, sync=False)

    def save(self, directory: Path) -> None:
        self._on_learner("save", directory)

    def load(self, directory: Path) -> None:
        self._on_learner("load", directory)

    def close(self) -> None:
        try:
            if self._colocated is not None:
                try:
                    ray.get(self._colocated.call.remote("close"))
                except _ACTOR_LOST:
                    pass
            if self.reward is not None:
                self.reward.close()
        finally:
            for handle in [self._colocated, self._learner, *self._engines]:
                if handle is not None:
                    ray.kill(handle)
            if self._started_ray:
                ray.shutdown()

    # -- actors -----------------------------------------------------------------------------

    def _on_learner(self, method: str, *args):
        handle = self._colocated if self._colocated is not None else self._learner
        try:
            return ray.get(handle.call.remote(method, *args))
        except _ACTOR_LOST as e:
            raise self._learner_lost(e) from None

    def _learner_lost(self, err: Exception) -> LearnerLost:
        return LearnerLost(f"the learner actor died ({type(err).__name__}: {err}); its optimizer state is lost. "
                           f"Resume the run from its last checkpoint with `rlxf train CONFIG --resume`.")

    def _new_engine(self):
        rc = self.cfg.ray
        return ray.remote(_Engine).options(num_cpus=rc.engine_cpus, num_gpus=rc.engine_gpus, **self._options).remote(
            self.cfg, rc.engine_cpus)

    def _replace_engine(self, i: int, err: Exception, *, sync: bool = True) -> None:
        """Engine ``i`` died: start a new one with the current weights (its requests are retried)."""
        self.restarts += 1
        if self.restarts > self.cfg.ray.max_restarts:
            raise RuntimeError(f"engine actors died {self.restarts} times (ray.max_restarts="
                               f"{self.cfg.ray.max_restarts}); last: {type(err).__name__}: {err}") from None
        log.warning("engine actor %d died (%s); starting a new one and retrying its requests (restart %d of %d)",
                    i, type(err).__name__, self.restarts, self.cfg.ray.max_restarts)
        t0 = time.perf_counter()
        self._engines[i] = self._new_engine()
        if sync and self._weights_ref is not None:
            ray.get(self._engines[i].update_weights.remote(self._weights_ref, self._version))
        log.info("engine actor %d replaced in %.1fs", i, time.perf_counter() - t0)


def _pythonpath() -> str:
    """The driver's import path, so a local Ray's workers import the same rlxf and plugins."""
    import os
    import sys

    return os.pathsep.join(p for p in sys.path if p)

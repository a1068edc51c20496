"""The local placement: every role of an RL run in this process (the embedded default).

This is where config names become objects (models, engine, reward, the algorithm's functions).
The engine shares the actor's process (``rollout.mode: sync``; weight sync hands it the actor's
parameters, which it copies or packs into its own buffers), or runs in a subprocess
(``rollout.mode: async``, ``rlxf.rollout.process``) and decodes while the learner trains. No Ray.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rlxf.algorithms import make_kl_controller, registry
from rlxf.config import Config
from rlxf.config.env import EnvConfig
from rlxf.data import SFTExample
from rlxf.models import load_from_config, load_model
from rlxf.models.loading import prepare_model
from rlxf.placement.base import Placement, close_all, close_during
from rlxf.rewards import build_run_reward
from rlxf.rollout import SamplingParams, build_engine_from_config
from rlxf.rollout.stream import EngineStream, GroupStream
from rlxf.trainer.collect import EngineRollout
from rlxf.trainer.distributed import SINGLE, DataParallel
from rlxf.trainer.experience import ExperienceMaker
from rlxf.trainer.learner import Learner
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.roles import Actor, Critic, ForwardSpec, Reference
from rlxf.types import Experience, Prompt, Trajectory

log = logging.getLogger("rlxf")


def build_learner(cfg: Config, model, tokenizer, *, reference_model=None, critic_trunk=None,
                  dp: DataParallel = SINGLE) -> Learner:
    """Actor (around ``model``), reference and critic as the config's algorithm needs them.

    ``reference_model`` / ``critic_trunk``: in-memory copies to use instead of loading the
    reference from ``model.path`` and the critic's trunk from ``critic.path or model.path``.
    ``dp``: this process's rank among the learners (``ray.learners``); under FSDP the actor's
    model is sharded by the Actor, before its optimizer is built. The reference stays a full replica.
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    d = cfg.derived
    spec = ForwardSpec(micro_batch_size=d.micro_batch_size, packing=cfg.train.packing,
                       temperature=cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0,
                       chunk_size=cfg.model.logprob_chunk_size)
    total_optimizer_steps = d.optimizer_steps_per_step * cfg.train.steps
    # the actor waits while the critic warms up (critic.warmup_steps): its lr schedule spans the
    # steps it takes (d.actor_optimizer_steps), so that a cosine one ends at min_lr_ratio as the critic's does
    actor = Actor(model, PolicyObjective.from_config(cfg.algorithm, cfg.rollout.max_new_tokens),
                  cfg.train.optim, d.actor_optimizer_steps, spec, mini_batch_size=d.mini_batch_size, dp=dp,
                  ptx_coef=cfg.algorithm.ptx_coef)

    reference = None
    if cfg.algorithm.kl_coef > 0 and reference_model is not None:
        reference = Reference(reference_model, spec, dp)
    elif cfg.algorithm.kl_coef > 0:
        reference = Reference(load_model(cfg.model.path, device=device, dtype=dtype, revision=cfg.model.revision,
                                         trust_remote_code=cfg.model.trust_remote_code,
                                         linear_kernels=cfg.model.linear_kernels), spec, dp)
    critic = None
    if registry.needs("advantage", cfg.algorithm.advantage).values:
        from rlxf.models.value_model import ValueModel

        if critic_trunk is not None and cfg.critic.path is None:
            value_model = ValueModel(critic_trunk)
        else:
            # model.revision is model.path's: the critic's trunk at the policy's version, not the hub's newest
            value_model = ValueModel.from_pretrained(cfg.critic.path or cfg.model.path, device=device, dtype=dtype,
                                                     revision=None if cfg.critic.path else cfg.model.revision,
                                                     gradient_checkpointing=cfg.model.gradient_checkpointing,
                                                     trust_remote_code=cfg.model.trust_remote_code,
                                                     linear_kernels=cfg.model.linear_kernels)
        critic = Critic(value_model, cfg.critic.optim, total_optimizer_steps, spec, cfg.algorithm.value_clip,
                        registry.checked("loss_agg", cfg.algorithm.loss_agg),
                        float(cfg.algorithm.loss_agg_norm or cfg.rollout.max_new_tokens), dp=dp)
    return Learner(
        tokenizer=tokenizer, actor=actor, reference=reference, critic=critic,
        experience=ExperienceMaker.from_config(cfg.algorithm, cfg.rollout.max_new_tokens, d.optimizer_steps_per_step),
        kl=make_kl_controller(cfg.algorithm.kl_coef, cfg.algorithm.kl_target, cfg.algorithm.kl_horizon),
        mini_batch_size=d.mini_batch_size, ppo_epochs=cfg.train.ppo_epochs, seed=cfg.seeds.init, dp=dp,
        offload_optimizer=cfg.train.offload_optimizer == "on"
        or (cfg.train.offload_optimizer == "auto" and device.type == "cuda"),
        critic_warmup_steps=cfg.critic.warmup_steps,
    )


def in_memory_copies(cfg: Config, model) -> dict:
    """Frozen copies of an in-memory policy, taken before training touches it: the reference
    (when ``kl_coef`` > 0) and the critic's trunk (when the estimator needs values)."""
    import copy

    from rlxf.models.loading import unwrap_model

    copies = {}
    if cfg.algorithm.kl_coef > 0:
        copies["reference_model"] = prepare_model(copy.deepcopy(model), cfg.model, train=False)
    if registry.needs("advantage", cfg.algorithm.advantage).values and cfg.critic.path is None:
        copies["critic_trunk"] = copy.deepcopy(unwrap_model(model).base_model)
    return copies


class LocalPlacement(Placement):
    """Learner, engine and reward as plain objects in this process."""

    def __init__(self, learner: Learner, engine, reward, env: EnvConfig | None = None):
        self.learner = learner
        self.engine = engine
        self.reward = reward
        self.tokenizer = learner.tokenizer
        self.env = env
        if env is None:
            self._rollout = EngineRollout(engine, learner.tokenizer, reward)
        else:  # multi-turn: generate runs episodes whose trajectories carry the environment's masks
            from rlxf.envs.rollout import EnvRollout

            self._rollout = EnvRollout(env, engine, learner.tokenizer, reward if env.use_verifiers else None)

    @classmethod
    def from_config(cls, cfg: Config, *, model=None, tokenizer=None, reward=None,
                    dp: DataParallel = SINGLE) -> LocalPlacement:
        """Load models, engine and reward for ``cfg``.

        ``model`` and ``tokenizer``: an in-memory policy (a transformers causal LM, trained in
        place) instead of loading ``model.path``; the reference and the critic's trunk start
        as copies of it. ``reward``: a built reward function instead of ``build_run_reward(cfg)``.
        ``dp``: the learner's rank, when this placement is rank 0 of several (Ray, colocated).
        """
        copies = {}
        if model is None:
            model, tokenizer = load_from_config(cfg.model)
        else:
            copies = in_memory_copies(cfg, model)
            model = prepare_model(model, cfg.model)
        param = next(model.parameters())
        started: list = []  # what this call started: closed again when a later part fails to build
        try:
            if cfg.rollout.mode == "async":  # the engine decodes in its own process while the learner trains
                from rlxf.rollout.process import EngineProcess, EngineRecipe

                learner = build_learner(cfg, model, tokenizer, dp=dp, **copies)
                engine = EngineProcess(EngineRecipe.of(model, tokenizer, cfg.rollout, cfg.seeds.sampling),
                                       learner.named_parameters(), version=0)
                started.append(engine)
            else:  # the engine first: it takes the model's full weights, which FSDP then shards (dp)
                engine = build_engine_from_config(cfg.rollout, model, tokenizer, device=param.device,
                                                  dtype=param.dtype, seed=cfg.seeds.sampling)
                started.append(engine)
                learner = build_learner(cfg, model, tokenizer, dp=dp, **copies)
            if reward is None:
                reward = build_run_reward(cfg)
                started.append(reward)
            return cls(learner, engine, reward, env=cfg.env)
        except BaseException as e:  # an engine process or a verifier pool left running after a failed start
            close_during(e, lambda: close_all(close for holder in reversed(started)
                                              if (close := getattr(holder, "close", None)) is not None),
                         "closing what the placement had started")
            raise

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        return self._rollout.generate(prompts, seeds, sampling, first_group=first_group)

    def stream(self) -> GroupStream:
        if hasattr(self.engine, "submit"):  # an EngineProcess: it decodes while the learner trains
            if self.env is not None:        # episodes run in threads of their own, its turns decode there
                from rlxf.envs.rollout import EpisodeStream

                return EpisodeStream(self._rollout)
            return EngineStream(self.engine, self.tokenizer)
        return super().stream()

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        return self._rollout.score(trajs, max_new_tokens)

    def make_experience(self, trajs: list[Trajectory]) -> tuple[Experience, dict[str, float]]:
        return self.learner.make_experience(trajs)

    def update(self, exp: Experience, step: int, demos: list[list[SFTExample]] | None = None,
               time_spent: float | None = None) -> dict[str, float]:
        return self.learner.update(exp, step, demos, time_spent)

    def sync_weights(self, version: int) -> None:
        self.engine.update_weights(self.learner.named_parameters(), version=version)

    def save(self, directory: Path) -> None:
        self.learner.save(directory)

    def load(self, directory: Path) -> None:
        self.learner.load(directory)

    def close(self) -> None:
        close_all(close for holder in (self.reward, self._rollout, self.engine)
                  if (close := getattr(holder, "close", None)) is not None)

"""The local placement: every role of an RL run, built in this process from the config.

This is the only place that turns config names into objects (models, engine, reward,
data, the algorithm's functions); the loop then calls roles through their methods. A Ray
placement will build the same roles inside actors and hand the loop handles to them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rlxf.algorithms import make_kl_controller, registry
from rlxf.config import Config
from rlxf.data import PromptData, PromptSampler, build_prompt_data
from rlxf.models import load_from_config, load_model
from rlxf.rewards import build_reward
from rlxf.rollout import SamplingParams, build_engine_from_config
from rlxf.trainer.experience import ExperienceMaker
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.roles import Actor, Critic, ForwardSpec, Reference

log = logging.getLogger("rlxf")


@dataclass
class Roles:
    cfg: Config
    tokenizer: Any
    actor: Actor
    reference: Reference | None     # only when algorithm.kl_coef > 0
    critic: Critic | None           # only for estimators that need values (GAE)
    engine: Any                     # rlxf.rollout.Engine
    reward: Any                     # rlxf.rewards scorer: .score(list[RewardInput]) -> list[ScoredSample]
    data: PromptData
    sampler: PromptSampler
    sampling: SamplingParams
    experience: ExperienceMaker
    kl: Any                         # Fixed/AdaptiveKLController: .value, .update(kl, n)

    def close(self) -> None:
        close = getattr(self.reward, "close", None)
        if close is not None:
            close()


def needs_critic(advantage: str) -> bool:
    return advantage == "gae"


def build(cfg: Config) -> Roles:
    """Load models, engine, reward and data for ``cfg``."""
    model, tokenizer = load_from_config(cfg.model)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    d = cfg.derived
    spec = ForwardSpec(micro_batch_size=cfg.train.micro_batch_size, packing=cfg.train.packing,
                       temperature=cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0,
                       chunk_size=cfg.model.logprob_chunk_size)
    total_optimizer_steps = d.optimizer_steps_per_step * cfg.train.steps
    actor = Actor(model, PolicyObjective.from_config(cfg.algorithm, cfg.rollout.max_new_tokens),
                  cfg.train.optim, total_optimizer_steps, spec)

    reference = None
    if cfg.algorithm.kl_coef > 0:
        reference = Reference(load_model(cfg.model.path, device=device, dtype=dtype, revision=cfg.model.revision,
                                         trust_remote_code=cfg.model.trust_remote_code,
                                         linear_kernels=cfg.model.linear_kernels), spec)
    critic = None
    if needs_critic(cfg.algorithm.advantage):
        from rlxf.models.value_model import ValueModel

        value_model = ValueModel.from_pretrained(cfg.critic.path or cfg.model.path, device=device, dtype=dtype,
                                                 gradient_checkpointing=cfg.model.gradient_checkpointing,
                                                 trust_remote_code=cfg.model.trust_remote_code,
                                                 linear_kernels=cfg.model.linear_kernels)
        critic = Critic(value_model, cfg.critic.optim, total_optimizer_steps, spec, cfg.algorithm.value_clip,
                        registry.get("loss_agg", cfg.algorithm.loss_agg),
                        float(cfg.algorithm.loss_agg_norm or cfg.rollout.max_new_tokens))

    engine = build_engine_from_config(cfg.rollout, model, tokenizer, device=device, dtype=dtype, seed=cfg.run.seed)
    reward = build_reward(cfg.reward)
    data = build_prompt_data(cfg.data, tokenizer, seed=cfg.run.seed)
    log.info("data: %d train / %d held-out prompts (%s)", len(data.train), len(data.test), data.report)
    sampler = PromptSampler(data.train, seed=cfg.run.seed, shuffle=cfg.data.shuffle)
    return Roles(
        cfg=cfg, tokenizer=tokenizer, actor=actor, reference=reference, critic=critic, engine=engine,
        reward=reward, data=data, sampler=sampler,
        sampling=SamplingParams.from_config(cfg.rollout),
        experience=ExperienceMaker.from_config(cfg.algorithm, cfg.rollout.max_new_tokens, d.optimizer_steps_per_step),
        kl=make_kl_controller(cfg.algorithm.kl_coef, cfg.algorithm.kl_target, cfg.algorithm.kl_horizon),
    )

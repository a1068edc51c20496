"""The learning side of an RL run: actor, reference, critic and the algorithm's state.

A placement hosts one ``Learner`` (in this process for ``local``, inside a trainer actor for a
distributed placement) and calls it for the two phases that touch weights:

    make_experience   trajectories -> Experience (π_old, π_ref, V where needed; advantages)
    update            epochs x mini-batches of the actor (and critic); drift; adaptive KL

Under data parallelism (``dp``) one ``Learner`` runs in each of N processes, and the placement
calls every rank with the same arguments; ranks return the same results, and rank 0 alone
writes checkpoints, which are those of one process (so a run resumes under any N).

and to save or load everything a bit-exact resume needs into a checkpoint directory:

    model/            the actor, HF format (merged when LoRA trains)
    critic/           the value model (PPO)
    learner_state.pt  optimizers, schedules, KL controller, baseline, LoRA weights
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlxf.errors import UserInputError
from rlxf.models import load_model, save_model
from rlxf.models.loading import merged_state_dict, unwrap_model
from rlxf.trainer.distributed import SINGLE, DataParallel
from rlxf.trainer.experience import ExperienceMaker, drift_metrics
from rlxf.trainer.roles import Actor, Critic, Reference
from rlxf.trainer.seeds import derive_seed
from rlxf.trainer.trainable import check_adapters_fit
from rlxf.types import Experience, Trajectory

if TYPE_CHECKING:
    from rlxf.data import SFTExample

log = logging.getLogger("rlxf")

STATE_FILE = "learner_state.pt"


def mini_batch_plan(num_samples: int, mini_batch_size: int, ppo_epochs: int, seed: int, step: int) -> list[list[int]]:
    """Row indices of each optimizer step: epochs x shuffled mini-batches (seeded by step)."""
    if mini_batch_size >= num_samples and ppo_epochs == 1:
        return [list(range(num_samples))]
    gen = torch.Generator().manual_seed(derive_seed(seed, step, 7))
    plan = []
    for _ in range(ppo_epochs):
        perm = torch.randperm(num_samples, generator=gen).tolist()
        plan += [perm[i:i + mini_batch_size] for i in range(0, num_samples, mini_batch_size)]
    return plan


# what decides the weights' names and shapes: a checkpoint of another architecture fails
# load_state_dict with hundreds of "size mismatch" lines instead of one sentence
SHAPE_FIELDS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "intermediate_size", "tie_word_embeddings")


def check_same_shape(model_config, saved_config, where: Path) -> None:
    """Refuse a checkpoint whose model is not the shape of the one model.path built now (the
    folder at model.path was replaced by another model between the run and its resume)."""
    differ = [f"{k}: now {getattr(model_config, k, None)!r}, checkpoint {getattr(saved_config, k, None)!r}"
              for k in SHAPE_FIELDS if getattr(model_config, k, None) != getattr(saved_config, k, None)]
    if differ:
        raise UserInputError(
            f"--resume: the model in {where} is not the shape of the one model.path loads now ({'; '.join(differ)}); "
            f"model.path must hold the model the run started from. Point it there, or start a new run")


@dataclass
class Learner:
    """Actor, reference and critic, with the experience maker and KL controller of the algorithm."""

    tokenizer: Any
    actor: Actor
    reference: Reference | None     # only when algorithm.kl_coef > 0
    critic: Critic | None           # only for estimators that need values (registry ``Needs``)
    experience: ExperienceMaker
    kl: Any                         # Fixed/AdaptiveKLController: .value, .update(kl, n)
    mini_batch_size: int            # samples per optimizer step
    ppo_epochs: int                 # passes over each step's batch
    seed: int                       # the init seed: seeds each step's mini-batch shuffle
    dp: DataParallel = SINGLE       # this process's learner rank (one process: SINGLE)
    offload_optimizer: bool = False  # keep optimizer state in host memory between updates
    critic_warmup_steps: int = 0    # RL steps 1..N train the critic alone (critic.warmup_steps)

    @property
    def _trained(self) -> list:
        """The roles with an optimizer: the actor, and the critic where there is one."""
        return [role for role in (self.actor, self.critic) if role is not None]

    def make_experience(self, trajs: list[Trajectory]) -> tuple[Experience, dict[str, float]]:
        return self.experience(trajs, self.actor, self.reference, self.critic, self.kl.value)

    def update(self, exp: Experience, step: int, demos: list[list[SFTExample]] | None = None,
               time_spent: float | None = None) -> dict[str, float]:
        plan = mini_batch_plan(len(exp), self.mini_batch_size, self.ppo_epochs, self.seed, step)
        if time_spent is not None:  # the run has a time budget: the schedules follow it too
            for role in self._trained:
                role.follow_time_budget(time_spent)
        for role in self._trained if self.offload_optimizer else ():
            role.restore_optimizer_state()
        warming_up = self.critic is not None and step <= self.critic_warmup_steps
        if warming_up:  # the actor waits for a critic that predicts returns: no step, no schedule step
            metrics, first_logprobs, ran = {"skipped": 0.0, "critic/warming_up": 1.0}, None, None
        else:
            metrics, first_logprobs, ran = self.actor.update(exp, plan, self.kl.value, demos)
        if self.critic is not None:
            metrics |= self.critic.update(exp, plan)
            # the divergence guard (train.max_skipped_steps) reads `skipped`: a step either role
            # skipped on a non-finite loss or gradient counts
            metrics["skipped"] = max(metrics["skipped"], metrics["critic/skipped"])
        if self.offload_optimizer:  # rollout and experience until the next update: the moments wait in host memory
            metrics["memory/optimizer_offloaded_mb"] = sum(r.offload_optimizer_state() for r in self._trained) / 2**20
        if first_logprobs is None and exp.old_logprobs is None:  # warming up: the policy did not move
            return {**metrics, "kl_coef": self.kl.value}
        # π_old: recomputed before the update, or the update's first forward; measured on the rows
        # it holds: every row where KL-in-reward needed it first, else the rows the update ran
        old = exp.old_logprobs if exp.old_logprobs is not None else first_logprobs
        measured = None if exp.old_logprobs is not None and self.experience.kl_in_reward else ran
        # the trainer holds version step - 1 (the weights after step - 1 updates) when it trains step
        drift = drift_metrics(exp, old, self.experience.kl_estimator, trainer_version=step - 1, rows=measured)
        if "kl" in drift:
            self.kl.update(drift["kl"], len(exp))
        return {**metrics, **drift, "kl_coef": self.kl.value}

    def named_parameters(self):
        """The actor's weights, as the engine loads them: plain transformers names. A LoRA actor
        is sent merged (base + B·A·scale per adapted layer): the engines hold no adapters, and
        PEFT's wrapped names (``...q_proj.base_layer.weight``, ``lora_A``) match none of theirs."""
        model = self.actor.model
        if self.dp.lockstep:  # FSDP: gathered from the shards (a collective), on rank 0
            return self.dp.full_state_dict(model).items()
        if unwrap_model(model) is not model:
            return merged_state_dict(model).items()
        return model.named_parameters()

    def save(self, directory: Path) -> None:
        """Rank 0 writes what one process writes; under FSDP every rank takes part in gathering."""
        weights = self.dp.full_state_dict(self.actor.model) if self.dp.lockstep else None
        state = {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict() if self.critic is not None else None,
            "kl": self.kl.state_dict(),
            "experience": self.experience.state_dict(),
            "trainable": self.actor.adapter_state(),
        }
        if self.dp.rank != 0:
            return
        save_model(self.actor.model, directory / "model", self.tokenizer, state=weights)
        if self.critic is not None:
            self.critic.model.save_pretrained(directory / "critic", self.tokenizer)
        torch.save(state, directory / STATE_FILE)

    def load(self, directory: Path) -> None:
        state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
        if "actor" not in state:  # TrainableModel.save's {"optim", "trainable"}
            raise UserInputError(
                f"--resume: {directory} is a checkpoint of `rlxf sft`, `rlxf rm` or `rlxf dpo`, not of an RL run "
                f"(`rlxf train`); continue it with the command that made the run, with --resume")
        actor = self.actor
        check_adapters_fit(state["trainable"], actor.model, directory)
        if state["trainable"]:
            actor.load_adapter_state(state["trainable"])
        else:
            fresh = load_model(directory / "model", device=actor.device, dtype=actor.dtype)
            check_same_shape(unwrap_model(actor.model).config, fresh.config, directory / "model")
            self.dp.load_full_state_dict(actor.model, fresh.state_dict())
            del fresh
        actor.load_state_dict(state["actor"])
        if self.critic is not None:
            from rlxf.models.value_model import ValueModel

            fresh = ValueModel.from_pretrained(directory / "critic", device=actor.device, dtype=actor.dtype)
            self.critic.model.load_state_dict(fresh.state_dict())
            self.critic.load_state_dict(state["critic"])
        self.kl.load_state_dict(state["kl"])
        self.experience.load_state_dict(state["experience"])
        for role in self._trained if self.offload_optimizer else ():
            role.offload_optimizer_state()

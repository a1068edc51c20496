"""The root config: one typed schema for every rlxf command."""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any

from pydantic import Field, model_validator

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.base import Section
from rlxf.config.data import DataConfig
from rlxf.config.env import EnvConfig
from rlxf.config.model import ModelConfig
from rlxf.config.preference import DPOConfig, LabelConfig, RewardModelConfig
from rlxf.config.reward import RewardConfig
from rlxf.config.rollout import RolloutConfig
from rlxf.config.run import CheckpointConfig, LoggingConfig, RayConfig, RunConfig, Seeds
from rlxf.config.train import CriticConfig, EvalConfig, SFTConfig, TrainConfig, TrainDerived, check_divisible


class Config(Section):
    """A whole run. Load with ``rlxf.config.load_config(path, overrides)``."""

    run: RunConfig = Field(default_factory=RunConfig, description="Name, output directory, seed, placement.")
    model: ModelConfig = Field(..., description="The policy model.")
    data: DataConfig = Field(..., description="Prompt source and tokenization.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Generation.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Verifiers and reward service.")
    env: EnvConfig | None = Field(
        None, description="A multi-turn environment: rollouts become episodes (rlxf.envs); null = single-turn."
    )
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="RL algorithm.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Batch sizes and optimisation.")
    critic: CriticConfig = Field(default_factory=CriticConfig, description="PPO critic (value model).")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="Supervised fine-tuning (`rlxf sft`).")
    rm: RewardModelConfig = Field(default_factory=RewardModelConfig, description="Reward-model training (`rlxf rm`).")
    dpo: DPOConfig = Field(default_factory=DPOConfig, description="DPO, IPO, cDPO, SimPO (`rlxf dpo`).")
    label: LabelConfig = Field(default_factory=LabelConfig, description="RLAIF preference labelling (`rlxf label`).")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpointing.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Metrics and samples.")
    ray: RayConfig = Field(default_factory=RayConfig, description="Ray actors (`run.placement: ray`).")
    plugins: list[str] = Field(
        default_factory=list,
        description="Python modules imported before the run starts, e.g. to register a custom "
        "advantage estimator or verifier.",
    )

    @model_validator(mode="before")
    @classmethod
    def _async_correction(cls, data: Any) -> Any:
        """``algorithm.off_policy`` left unset under ``rollout.mode: async`` with
        ``max_staleness`` >= 1 is ``tis``: samples from weights a step or more old, trained on
        as if fresh, cost held-out accuracy at equal steps, and tis won it back (3 seeds of the
        quickstart's GRPO: benchmarks/README.md, "Async vs sync"). k = 0 keeps ``none``: a run
        equal to sync, bit for bit."""
        if not isinstance(data, dict):
            return data
        rollout, algo = data.get("rollout") or {}, data.get("algorithm") or {}
        if not isinstance(algo, dict) or "off_policy" in algo:  # set (or a built AlgorithmConfig): kept
            return data
        field = rollout.get if isinstance(rollout, dict) else lambda name, default: getattr(rollout, name, default)
        try:
            stale = int(field("max_staleness", 0))
        except (TypeError, ValueError, OverflowError):  # not a number: the field's own check says so, with its origin
            return data
        if field("mode", "sync") == "async" and stale >= 1:
            data = {**data, "algorithm": {**algo, "off_policy": "tis"}}
        return data

    @model_validator(mode="after")
    def _batch_arithmetic(self) -> Config:
        samples = self.train.prompts_per_step * self.rollout.n
        mini = self.train.mini_batch_size or samples
        check_divisible(samples, mini, min(self.train.micro_batch_size, mini))
        if self.algorithm.dynamic_sampling and self.rollout.n < 2:
            raise ValueError("algorithm.dynamic_sampling needs rollout.n >= 2")
        if self.algorithm.ptx_coef > 0 and self.data.ptx is None:
            raise ValueError(f"algorithm.ptx_coef is {self.algorithm.ptx_coef:g} but data.ptx is not set; give the "
                             f"demonstrations (e.g. data.ptx.task=arithmetic, or data.ptx.source=jsonl with "
                             f"data.ptx.train_path) or set algorithm.ptx_coef=0")
        if self.reward.url and any(s.verifiers for s in self.data.sources):
            raise ValueError("data.sources[].verifiers is set but reward.url scores remotely with the server's "
                             "verifiers; drop reward.url or the per-source verifiers")
        if self.algorithm.ptx_coef > 0 and self.run.placement == "ray" and self.ray.learners > 1:
            raise ValueError("algorithm.ptx_coef > 0 runs on one learner rank: the demonstrations are not yet "
                             "sharded over ray.learners; set ray.learners=1 or algorithm.ptx_coef=0")
        if self.run.placement == "ray" and self.ray.learners > 1 and self.ray.learner_strategy == "fsdp" \
                and self.model.lora.r > 0:
            raise ValueError("ray.learner_strategy=fsdp does not shard LoRA adapters; use ray.learner_strategy=ddp "
                             "(the adapters are small) or train without LoRA (model.lora.r=0)")
        if self.run.placement == "ray" and self.ray.reward_actors and self.ray.mode == "colocated":
            raise ValueError("ray.reward_actors scores apart from the learner; ray.mode=colocated scores in the one "
                             "actor that holds everything: use ray.mode=disaggregated or set ray.reward_actors=0")
        if self.run.placement == "ray" and self.ray.reward_actors and self.reward.url:
            raise ValueError("ray.reward_actors and reward.url both say where to score; reward.url sends the samples "
                             "to a reward server: set ray.reward_actors=0")
        if self.eval.pass_k > 0 and (self.rollout.temperature == 0 or self.rollout.top_k == 1):
            greedy = "temperature=0" if self.rollout.temperature == 0 else "top_k=1"
            raise ValueError(f"eval.pass_k={self.eval.pass_k} samples k responses per problem with the rollout's "
                             f"sampling, and rollout.{greedy} makes them all the greedy one; set "
                             f"rollout.temperature > 0 (and top_k 0 or > 1), or eval.pass_k=0")
        if self.rollout.mode == "async":
            self._check_async()
        self._check_sft_stop()
        self._check_length_rules()
        return self

    def _check_length_rules(self) -> None:
        """Rules about cut-off responses that would silently do nothing, or everything."""
        algo, rollout = self.algorithm, self.rollout
        # the engine cuts a response at the context window: a longer budget would be a promise
        # the run does not keep (and the lengths the overlong rules measure against never reached)
        window = rollout.max_model_len
        for name, new_tokens in (("rollout.max_new_tokens", rollout.max_new_tokens),
                                 ("eval.max_new_tokens", self.eval.max_new_tokens)):
            if window is not None and new_tokens is not None and self.data.max_prompt_len + new_tokens > window:
                raise ValueError(f"data.max_prompt_len={self.data.max_prompt_len} + {name}={new_tokens} is more than "
                                 f"rollout.max_model_len={window} (the context window): the longest prompts would "
                                 f"leave their responses fewer tokens than {name} says. Raise max_model_len to "
                                 f"{self.data.max_prompt_len + new_tokens}, or lower {name} or data.max_prompt_len")
        if algo.overlong_buffer > 0 and algo.overlong_penalty > 0:
            from rlxf.algorithms.shaping import overlong_buffer_tokens  # noqa: PLC0415 - torch, only for DAPO's rule

            if overlong_buffer_tokens(algo.overlong_buffer, rollout.max_new_tokens) < 1:
                # the smallest fraction of 3 decimals that makes one token (1/3 rounded would not)
                least = math.ceil(1000 / rollout.max_new_tokens) / 1000
                raise ValueError(f"algorithm.overlong_buffer={algo.overlong_buffer:g} of rollout.max_new_tokens="
                                 f"{rollout.max_new_tokens} is less than one token, so the overlong penalty would "
                                 f"never apply; raise overlong_buffer (at least {least:g}) or set it to 0")
        if algo.mask_truncated and rollout.ignore_eos and not (rollout.stop_token_ids or rollout.stop_strings) \
                and self.env is None:
            raise ValueError("algorithm.mask_truncated masks responses cut off at rollout.max_new_tokens, and with "
                             "rollout.ignore_eos and no stop_token_ids / stop_strings every response is: nothing "
                             "would train. Set rollout.ignore_eos: false, give a stop, or algorithm.mask_truncated: false")

    def _check_sft_stop(self) -> None:
        """``sft.stop_when`` names an evaluation metric; a source's must be a source of this run
        (said now, not at the first evaluation). Other names are checked when it is first read."""
        target = self.sft.stop_when
        if target is None:
            return
        if not target.metric.startswith("eval/"):
            raise ValueError(f"sft.stop_when.metric {target.metric!r}: SFT stops on a held-out evaluation's "
                             f"metric, one of eval/accuracy, eval/reward_mean or eval/<source>/accuracy")
        parts = target.metric.split("/")
        labels = [s.label for s in self.data.sources]
        if len(parts) == 3 and parts[1] not in labels:
            have = f"this run's sources are {', '.join(labels)}" if labels else "this run has one source (no data.sources)"
            raise ValueError(f"sft.stop_when.metric {target.metric!r} is a metric of source {parts[1]!r}, but "
                             f"{have}; use eval/accuracy or eval/<source>/accuracy")

    def _check_async(self) -> None:
        """What ``rollout.mode: async`` cannot run with, said before any work starts."""
        if self.rollout.threads not in (None, 1):
            raise ValueError(f"rollout.mode=async runs the engine in its own process with one decode worker "
                             f"(one core) so that weights can be swapped between decode steps; "
                             f"rollout.threads={self.rollout.threads} is for sync mode: unset it")
        if self.run.placement == "ray" and self.ray.mode == "colocated":
            raise ValueError("rollout.mode=async needs the engine apart from the learner; ray.mode=colocated "
                             "holds them in one actor: use ray.mode=disaggregated or run.placement=local")
        if self.data.curriculum.enabled:
            raise ValueError("data.curriculum skips prompts by the pass rates of the steps before, which async "
                             "mode has not scored yet when it draws; set rollout.mode=sync or turn the "
                             "curriculum off")
        if self.run.placement == "ray" and self.ray.weight_sync == "collective":
            raise ValueError("rollout.mode=async sends weights to engine actors without waiting for them, "
                             "which a collective broadcast cannot do (every engine must join it at once); "
                             "use ray.weight_sync=object_store")

    @cached_property
    def derived(self) -> TrainDerived:
        """Batch arithmetic, computed once (the config is frozen, so it never goes stale)."""
        samples = self.train.prompts_per_step * self.rollout.n
        mini = self.train.mini_batch_size or samples
        per_epoch = samples // mini
        # a micro-batch cannot hold more than its mini-batch: capped, so shrinking the batch on the
        # command line needs no third override (`rlxf explain` says when the cap applies)
        micro = min(self.train.micro_batch_size, mini)
        max_tokens = self.data.max_prompt_len + self.rollout.max_new_tokens
        return TrainDerived(
            samples_per_step=samples,
            mini_batch_size=mini,
            optimizer_steps_per_epoch=per_epoch,
            optimizer_steps_per_step=per_epoch * self.train.ppo_epochs,
            actor_optimizer_steps=per_epoch * self.train.ppo_epochs * max(1, self.train.steps - self.critic.warmup_steps),
            micro_batch_size=micro,
            grad_accum_steps=mini // micro,
            micro_batches_per_step=samples // micro * self.train.ppo_epochs,
            max_tokens_per_sample=max_tokens,
            max_tokens_per_step=samples * max_tokens,
        )

    @cached_property
    def seeds(self) -> Seeds:
        """The data, sampling and initialisation seeds; each unset one is ``run.seed``."""
        def pick(seed: int | None) -> int:
            return self.run.seed if seed is None else seed

        return Seeds(data=pick(self.run.data_seed), sampling=pick(self.rollout.seed), init=pick(self.run.init_seed))

"""Batch sizes, optimisation and evaluation."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rlxf.config.base import Section


class OptimConfig(Section):
    lr: float = Field(
        1e-5, gt=0,
        description="Peak learning rate (AdamW). The right value depends on the model's size more "
        "than on anything else, so no one default suits all: 1e-5 is at the top of what GRPO recipes "
        "use for pretrained 0.5-7B models (1e-6 to 1e-5). It barely moves a few-million-parameter "
        "model; 1e-4 moves one fast enough to find a reward's loophole (benchmarks/README.md, efficacy). "
        "Set it for your model.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = Field(
        (0.9, 0.999), description="AdamW betas (β1, β2), each in [0, 1).")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    warmup_steps: int = Field(
        0, ge=0,
        description="Linear warmup, in optimizer steps. AdamW's first steps move every parameter by "
        "about lr (its second-moment estimate rests on one gradient), which a warm-up of ~10 steps "
        "softens; RL recipes set it (the examples do). The default stays 0: the measurements so far "
        "do not separate its effect from the lr's (benchmarks/README.md, efficacy).",
    )
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="Learning-rate schedule after warmup."
    )
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine: final lr as a fraction of lr.")
    max_grad_norm: float | None = Field(1.0, gt=0, description="Clip the global gradient norm; None = off.")
    skip_zero_grad_steps: bool = Field(
        True,
        description="RL roles: when every gradient of an optimizer step is exactly zero (no learning "
        "signal: all advantages 0 and no KL or entropy term), skip the step, leaving weights, AdamW "
        "moments and the lr schedule untouched. Off: AdamW steps anyway, so momentum and weight decay "
        "keep moving the weights on steps with nothing to learn from.",
    )


class PolicyOptimConfig(OptimConfig):
    """The actor's optimizer: as OptimConfig, with a learning rate that follows the model's size."""

    lr: float | Literal["auto"] = Field(
        "auto",
        description="Peak learning rate (AdamW), or `auto`: 0.1 / (hidden_size x num_hidden_layers) from the "
        "model's config, the lr that keeps one Adam step's change of the network's output about the same "
        "across sizes (an update of ~lr per weight adds up over a layer's width and over its depth). The "
        "constant puts Qwen2.5-7B (3584 x 28) at 1.0e-6, where GRPO recipes for it sit; it gives 4.7e-6 for "
        "Qwen2.5-0.5B (896 x 24), 2.4e-5 for the `small` preset and 9.8e-5 for `tiny`. `rlxf explain` "
        "and the run's log show the value used. Measured against 1e-5 on untuned tasks: benchmarks/README.md, efficacy.",
    )

    schedule: Literal["constant", "cosine"] = Field(
        "cosine",
        description="Learning-rate schedule after warmup. `cosine` (the default) decays the lr to "
        "`min_lr_ratio` x lr over the run: over `train.steps`, or over `train.max_seconds` where the time "
        "budget ends the run first (the schedule is as far along as the further of the two; a time-budgeted "
        "run's lr then depends on its speed, as its length does). A run that ends at its peak lr stops wherever "
        "its last noisy step left the policy (on benchmarks/README.md's efficacy tasks a constant lr's "
        "held-out accuracy swung by 5-10 points between evaluations 50 steps apart); with the cosine the "
        "defaults gained 10 points or more on 4 of those 6 tasks in 5 minutes on three seeds of four (the fourth "
        "0.3 points short on one task), where the constant lr did on one seed of three. A cosine run keeps its length on --resume. `constant`: the "
        "peak lr throughout (verl's default; the quickstart's).",
    )
    min_lr_ratio: float = Field(
        0.1, ge=0, le=1,
        description="Cosine: final lr as a fraction of lr (0.1, as OpenRLHF's cosine_with_min_lr: the last "
        "steps still learn, at a tenth of the step size).",
    )

    @model_validator(mode="after")
    def _positive(self) -> PolicyOptimConfig:
        if self.lr != "auto" and not self.lr > 0:
            raise ValueError(f"train.optim.lr must be > 0 or `auto`, got {self.lr}")
        return self


class TrainConfig(Section):
    steps: int = Field(100, ge=1, description="RL steps (rollout + update rounds).")
    prompts_per_step: int = Field(16, ge=1, description="Prompts sampled per RL step.")
    mini_batch_size: int | None = Field(
        None, ge=1,
        description="Samples per optimizer step; None = all samples of the RL step (one optimizer "
        "step per epoch, fully on-policy).",
    )
    micro_batch_size: int = Field(
        8, ge=1, description="Samples per forward/backward pass (gradient accumulation splits a mini-batch into "
        "these); capped at the mini-batch when larger."
    )
    ppo_epochs: int = Field(1, ge=1, description="Passes over each RL step's samples.")
    max_seconds: float | None = Field(
        None, gt=0,
        description="Stop after the first step that ends this much wall time after training began "
        "(evaluated and checkpointed as a last step), even if `steps` are not done: a time budget, "
        "and RL and SFT compared for the same time. It budgets the run's whole training time: each "
        "checkpoint records the time trained so far and `--resume` counts on from it (the steps "
        "replayed after the checkpoint are timed again; the first evaluation is not counted), so a "
        "resumed run stops about where the uninterrupted one would. May be raised on `--resume` to "
        "train on under `optim.schedule: constant` (a cosine schedule anneals over the budget, and a resume "
        "keeps it, as it keeps `steps`). None = run all `steps`.",
    )
    packing: bool = Field(
        True, description="Pack a micro-batch's sequences into one row (no padding compute)."
    )
    max_skipped_steps: int = Field(
        3, ge=1, description="Stop the run after this many consecutive steps with a non-finite loss or gradient."
    )
    offload_optimizer: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Keep the optimizers' state (AdamW's moments: twice the trained weights in fp32) in "
        "pinned host memory between updates, so rollout has that accelerator memory; it moves back for "
        "each update (weights are not moved: the engine samples with them). `auto`: on when the actor "
        "is on a GPU (local, or Ray colocated where roles take turns on one device); on CPU there is "
        "nothing to gain and nothing moves.",
    )
    optim: PolicyOptimConfig = Field(default_factory=PolicyOptimConfig, description="Actor optimizer.")


class CriticConfig(Section):
    path: str | None = Field(
        None, description="Critic initialisation (causal LM trunk + new value head); default model.path."
    )
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Critic optimizer.")
    warmup_steps: int = Field(
        0, ge=0, description="RL steps at the start in which only the critic trains (verl's critic_warmup): the "
        "actor waits, weights and lr schedule as they are, until the new value head predicts returns, instead of "
        "taking its first steps on advantages from an untrained head. Needs an algorithm with a critic.",
    )


class EvalConfig(Section):
    every: int = Field(0, ge=0, description="Evaluate on the held-out split every N steps (0 = never during training).")
    at_start: bool = Field(False, description="Also evaluate before the first step.")
    num_problems: int = Field(500, ge=1, description="Held-out problems per evaluation (at most the split's size); in a "
                              "mixture, per source (the first this many of each source's held-out split).")
    pass_k: int = Field(
        0, ge=0, description="Also sample k responses per problem (temperature of rollout) for pass@k and mean@k (the fraction of samples right); 0 = greedy only."
    )
    max_new_tokens: int | None = Field(None, ge=1, description="Response length limit; default rollout.max_new_tokens.")


class TrainDerived(Section):
    """Batch arithmetic, computed once from the config (shown by `rlxf explain`)."""

    samples_per_step: int
    mini_batch_size: int
    micro_batch_size: int           # train.micro_batch_size, capped at the mini-batch
    optimizer_steps_per_epoch: int
    optimizer_steps_per_step: int
    actor_optimizer_steps: int      # the actor's in the run, what its lr schedule spans (not the critic's warm-up)
    grad_accum_steps: int
    micro_batches_per_step: int
    max_tokens_per_sample: int
    max_tokens_per_step: int


def check_divisible(samples: int, mini: int, micro: int) -> None:
    if samples % mini:
        raise ValueError(
            f"train.mini_batch_size={mini} does not divide the {samples} samples of a step "
            f"(train.prompts_per_step x rollout.n); choose a divisor of {samples}"
        )
    if mini % micro:
        raise ValueError(
            f"train.micro_batch_size={micro} does not divide train.mini_batch_size={mini}; "
            f"choose a divisor of {mini}"
        )


class SFTStopConfig(Section):
    metric: str = Field(
        ..., description="A metric of SFT's held-out evaluation: `eval/accuracy`, or `eval/<source>/accuracy` "
        "with several data sources (any key the evaluation logs)."
    )
    at_least: float = Field(..., description="Stop at the first evaluation where the metric is at least this.")


class SFTConfig(Section):
    steps: int = Field(1000, ge=1, description="Optimizer steps of supervised fine-tuning (`rlxf sft`).")
    batch_size: int = Field(32, ge=1, description="Examples per optimizer step.")
    micro_batch_size: int = Field(32, ge=1, description="Examples per forward/backward (packed); divides batch_size.")
    max_seconds: float | None = Field(
        None, gt=0, description="Stop after the first step that ends this much training time even if `steps` are "
        "not done (a time-matched baseline). Like `train.max_seconds` it budgets the whole run: `--resume` counts "
        "on from the time the checkpoint recorded, and may raise it to train on (under `sft.optim.schedule: cosine` "
        "it may not: the schedule anneals over it)."
    )
    eval_every: int = Field(0, ge=0, description="Evaluate on the held-out prompts every N steps with the reward (0 = at the end only).")
    stop_when: SFTStopConfig | None = Field(
        None, description="Stop before `steps` at the first evaluation (every `eval_every` steps) where "
        "`metric` is at least `at_least`: SFT to a level, e.g. \"sometimes right\" before RL. None = run all steps."
    )
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer.")

    @model_validator(mode="after")
    def _divides(self) -> SFTConfig:
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"sft.micro_batch_size={self.micro_batch_size} does not divide sft.batch_size={self.batch_size}"
            )
        if self.stop_when is not None and not self.eval_every:
            raise ValueError("sft.stop_when is read at each evaluation, and sft.eval_every is 0 (evaluate at the end "
                             "only); set sft.eval_every to how often to check it, e.g. 100")
        return self

"""Where a run lives, how it logs, how often it checkpoints."""

from __future__ import annotations

import importlib.util
import re
from typing import Literal

from pydantic import Field, field_validator

from rlxf.config.base import Section

# every seed is folded into derived seeds by its low 32 bits (``trainer.seeds.derive_seed``):
# past this, run.seed=2**32 would repeat run.seed=0's shuffles
MAX_SEED = 2**32 - 1


class RunConfig(Section):
    name: str = Field("run", description="Run name; outputs go to `<output_dir>/<name>/`.")
    output_dir: str = Field("runs", description="Parent directory of run directories.")
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="The run's seed: the default of its three separable seeds (data_seed, "
        "rollout.seed for sampling, init_seed); setting only this moves all three.",
    )
    data_seed: int | None = Field(
        None, ge=0, le=MAX_SEED,
        description="Seed of the data: train/held-out splits, procedural tasks and prompt order. "
        "Fix it and vary rollout.seed to repeat a run over sampling seeds on the same data. None = run.seed.",
    )
    init_seed: int | None = Field(
        None, ge=0, le=MAX_SEED,
        description="Seed of initialisation and training randomness: new weights (a value head), "
        "torch's global generator, the mini-batch shuffle. None = run.seed.",
    )
    placement: Literal["local", "ray"] = Field(
        "local",
        description="Where roles run. `local`: everything in this process (the embedded default). "
        "`ray`: roles as Ray actors (`pip install rlxf[ray]`; see the `ray:` section).",
    )
    threads: int = Field(
        0, ge=0, description="torch intra-op threads; 0 keeps torch's default (one per core)."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", v):
            raise ValueError(f"run name {v!r} may only hold letters, digits, '.', '_' and '-'")
        if re.fullmatch(r"\.+", v):  # '.' and '..' name run.output_dir itself or its parent
            raise ValueError(f"run name {v!r} is only dots: it would name run.output_dir or a folder above it; "
                             f"give the run a name")
        return v


class Seeds(Section):
    """The run's three seeds, resolved (``Config.seeds``): each random choice draws from one."""

    data: int       # splits, procedural tasks, prompt order
    sampling: int   # every rollout and evaluation request's sampling seed
    init: int       # weight initialisation, torch's global RNG, mini-batch shuffles


class LoggingConfig(Section):
    sinks: list[Literal["tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=list,
        description="Extra metrics sinks besides metrics.jsonl (always written). "
        "Each needs its extra installed: `pip install rlxf[tensorboard]` etc. A `--resume` logs to the "
        "same W&B / MLflow run (its id is kept in the run's sink_runs.json). A sink that fails mid-run is "
        "warned about and retried; the run goes on and metrics.jsonl keeps every step (the steps a sink "
        "missed: sink_missed.json).",
    )
    project: str = Field("rlxf", description="Project / experiment name for W&B and MLflow.")
    samples_fraction: float = Field(
        0.1, ge=0.0, le=1.0,
        description="Fraction of rollouts written to samples.jsonl each step (0 = none).",
    )
    progress: bool = Field(True, description="Show a live progress display on the terminal.")
    log_every: int = Field(1, ge=1, description="Print a metrics line every N steps.")

    @field_validator("sinks")
    @classmethod
    def _sinks_installed(cls, v: list[str]) -> list[str]:
        # asked for and missing is a config error, caught before any work starts, not a
        # warning in a scrolling log that leaves a run without the dashboard it was meant for
        for name in v:
            try:
                missing = importlib.util.find_spec(name) is None
            except ValueError:  # a module without a spec (already imported some other way)
                missing = False
            if missing:
                raise ValueError(f"{name!r} is not installed: pip install 'rlxf[{name}]', or remove it "
                                 "from logging.sinks (metrics.jsonl is always written)")
        return v


class CheckpointConfig(Section):
    every: int = Field(
        50, ge=0, description="Save a checkpoint every N RL steps, so a killed run can `--resume` "
        "(0 = only at the end, and on SIGTERM / Ctrl-C, which always checkpoint the finished step).",
    )
    keep_last: int = Field(
        2, ge=1, description="How many most recent checkpoints to keep; older ones are deleted (but the newest "
        "one whose files are all there, while every newer one lost a file). With 1, a checkpoint damaged in a "
        "way a file's length does not show leaves nothing to resume from: keep 2 or more."
    )
    save_final: bool = Field(
        True, description="Save a checkpoint when an RL run finishes (`rlxf sft`, `rm` and `dpo` always save their "
        "last step: it holds the model they were run for).")


class RayConfig(Section):
    """Where roles run under ``run.placement: ray``."""

    address: str | None = Field(
        None, description="Ray cluster to join (`auto`, or `ray://host:10001`); None starts a local Ray "
        "instance for the run and shuts it down at the end.",
    )
    mode: Literal["colocated", "disaggregated"] = Field(
        "colocated",
        description="`colocated`: learner, engine and reward share one actor and take turns (as `local`, in "
        "another process). `disaggregated`: the learner and each engine replica are separate actors with "
        "their own resources; weights go learner -> engines through the object store after each step.",
    )
    engines: int = Field(1, ge=1, description="Rollout engine replicas (disaggregated); a step's prompts are "
                         "split between them.")
    learners: int = Field(
        1, ge=1, description="Learner processes (data-parallel ranks of one torch.distributed group: gloo on "
        "CPU, NCCL where the learners have GPUs). Each takes its share of every mini-batch; gradients are "
        "summed over ranks, so N learners train the weights one learner trains on the same global batch (up to "
        "float rounding). "
        "Rank 0 writes checkpoints (the same files as one learner) and sends weights to the engines. "
        "Colocated: rank 0 also holds the engine and reward; the others are learner-only actors.",
    )
    learner_strategy: Literal["ddp", "fsdp"] = Field(
        "ddp", description="How the learners split the model (with `ray.learners` > 1). `ddp`: each holds a full "
        "replica with its optimizer; gradients are all-reduced. `fsdp`: FSDP2 (`fully_shard`): weights, "
        "gradients and optimizer state sharded across the learners (memory per learner ~1/N of the "
        "trained model's), gathered for checkpoints and weight sync. Not with LoRA or a critic (PPO/GAE).",
    )
    weight_sync: Literal["object_store", "collective"] = Field(
        "object_store", description="How the learner's weights reach the engines (disaggregated). "
        "`object_store`: learner rank 0 puts them in Ray's object store once, each engine fetches them. "
        "`collective`: rank 0 broadcasts them over a torch.distributed group it shares with the engines "
        "(NCCL GPU to GPU where the learner and engines have GPUs, gloo otherwise), with no object-store copy.",
    )
    learner_cpus: float = Field(1.0, gt=0, description="CPUs reserved for each learner actor (and its torch "
                                "threads), or for the one colocated actor.")
    engine_cpus: float = Field(1.0, gt=0, description="CPUs reserved for each engine actor (disaggregated).")
    learner_gpus: float = Field(0.0, ge=0, description="GPUs for each learner actor (or the colocated actor); "
                                "1 per learner for NCCL data parallelism.")
    engine_gpus: float = Field(0.0, ge=0, description="GPUs for each engine actor (disaggregated).")
    reward_actors: int = Field(
        0, ge=0,
        description="Disaggregated: score with this many reward actors (each with its own verifiers and "
        "verifier pool, `reward.workers` processes each), a step's samples split between them; a dead one is "
        "replaced and its samples scored again. 0: the driver scores, in its own verifier pool.",
    )
    reward_cpus: float = Field(1.0, gt=0, description="CPUs reserved for each reward actor.")
    max_restarts: int = Field(3, ge=0, description="How often dead engine and reward actors are replaced (and "
                              "their requests retried), all together, before the run gives up.")

    @property
    def learner_backend(self) -> Literal["nccl", "gloo"]:
        """The learners' torch.distributed backend: NCCL when each learner has a GPU."""
        return "nccl" if self.learner_gpus > 0 else "gloo"

    @property
    def sync_backend(self) -> Literal["nccl", "gloo"]:
        """The weight broadcast's backend: NCCL when the learner and the engines have GPUs."""
        return "nccl" if self.learner_gpus > 0 and self.engine_gpus > 0 else "gloo"

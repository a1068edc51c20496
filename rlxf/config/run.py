"""Where a run lives, how it logs, how often it checkpoints."""

from __future__ import annotations

import importlib.util
import re
from typing import Literal

from pydantic import Field, field_validator

from rlxf.config.base import Section


class RunConfig(Section):
    name: str = Field("run", description="Run name; outputs go to `<output_dir>/<name>/`.")
    output_dir: str = Field("runs", description="Parent directory of run directories.")
    seed: int = Field(0, description="Seed for data order, sampling and initialisation.")
    placement: Literal["local"] = Field(
        "local",
        description="Where roles run. `local`: everything in this process (the embedded default).",
    )
    threads: int = Field(
        0, ge=0, description="torch intra-op threads; 0 keeps torch's default (one per core)."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", v):
            raise ValueError(f"run name {v!r} may only hold letters, digits, '.', '_' and '-'")
        return v


class LoggingConfig(Section):
    sinks: list[Literal["tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=list,
        description="Extra metrics sinks besides metrics.jsonl (always written). "
        "Each needs its extra installed: `pip install rlxf[tensorboard]` etc.",
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
        0, ge=0, description="Save a checkpoint every N RL steps (0 = only at the end of the run)."
    )
    keep_last: int = Field(
        2, ge=1, description="How many most recent checkpoints to keep; older ones are deleted."
    )
    save_final: bool = Field(True, description="Save a checkpoint when the run finishes.")

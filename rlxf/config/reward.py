"""How responses are scored."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from rlxf.config.base import Section


class VerifierConfig(Section):
    type: str = Field(
        ...,
        description="Verifier kind: math, exact, numeric, format, overlong, reasoning_gym, code, "
        "reward_model, judge, or `package.module:function` for a custom one.",
    )
    name: str | None = Field(None, description="Name used in logs; defaults to the type.")
    weight: float = Field(1.0, description="Weight of this score in the summed reward.")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of this verifier kind.")


class RewardConfig(Section):
    verifiers: list[VerifierConfig] = Field(
        default_factory=list, description="Verifiers whose weighted scores sum to the reward."
    )
    accuracy: str | None = Field(
        None,
        description="Name of the verifier whose score >= 1 counts as a correct answer for the "
        "accuracy metric; defaults to the first verifier.",
    )
    workers: int = Field(
        0, ge=0, description="Worker processes scoring concurrently; 0 scores in this process."
    )
    timeout_s: float = Field(30.0, gt=0, description="Per-sample time limit for a verifier call.")
    error_score: float = Field(
        0.0, description="Score given to a sample whose verifier raised, hung or crashed."
    )
    url: str | None = Field(
        None, description="Score remotely via `rlxf serve-reward` at this URL instead of locally."
    )

    @model_validator(mode="after")
    def _names_unique(self) -> RewardConfig:
        names = [v.name or v.type for v in self.verifiers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"reward.verifiers: names {sorted(dup)} repeat; give each a distinct `name`")
        if self.accuracy is not None and self.accuracy not in names:
            raise ValueError(f"reward.accuracy is {self.accuracy!r}; allowed: {names}")
        return self

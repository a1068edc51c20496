"""Preference training: the reward model (`rlxf rm`) and the DPO family (`rlxf dpo`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlxf.config.base import Section
from rlxf.config.train import OptimConfig


class PairTrainConfig(Section):
    """Optimisation over preference pairs, shared by `rlxf rm` and `rlxf dpo`."""

    steps: int = Field(200, ge=1, description="Optimizer steps.")
    batch_size: int = Field(16, ge=1, description="Preference pairs per optimizer step.")
    micro_batch_size: int = Field(
        16, ge=1, description="Pairs per forward/backward (both responses of a pair go together); divides batch_size."
    )
    eval_every: int = Field(
        0, ge=0, description="Evaluate on the held-out pairs every N steps (0 = at the start and the end only)."
    )
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer.")

    @model_validator(mode="after")
    def _divides(self):
        if self.batch_size % self.micro_batch_size:
            raise ValueError(f"micro_batch_size={self.micro_batch_size} does not divide batch_size={self.batch_size}; "
                             f"choose a divisor of {self.batch_size}")
        return self


class RewardModelConfig(PairTrainConfig):
    """Bradley–Terry reward model: a value head on the trunk of ``model.path``."""

    margin: float | None = Field(
        None,
        description="Ask the model to separate each pair by at least this score, ℓ = -log σ(r_w - r_l - m) "
        "(Llama 2); None = plain Bradley–Terry.",
    )
    stats_pairs: int = Field(
        512, ge=1,
        description="Training pairs (the first N) whose chosen and rejected responses the saved model scores "
        "for reward_stats.json: the mean and std that `normalize: standard` of the reward_model verifier uses.",
    )


class DPOConfig(PairTrainConfig):
    """Direct preference optimisation and its variants, from ``model.path`` as the reference."""

    loss: Literal["dpo", "ipo", "cdpo", "simpo"] = Field(
        "dpo",
        description="`dpo` -log σ(β h) (Rafailov 2023); `ipo` (h - 1/(2β))² (Azar 2023); `cdpo` conservative "
        "DPO with label_smoothing (Mitchell 2023); `simpo` reference-free, length-normalised, margin gamma "
        "(Meng 2024). h = log-ratio of chosen minus that of rejected, against the reference.",
    )
    beta: float = Field(0.1, gt=0, description="β: the strength of the implicit KL to the reference (SimPO: reward scale).")
    label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="cdpo: probability ε that a preference label is flipped."
    )
    gamma: float = Field(1.0, ge=0, description="simpo: target reward margin γ.")

    @model_validator(mode="after")
    def _smoothing_only_cdpo(self):
        if self.label_smoothing and self.loss != "cdpo":
            raise ValueError(f"dpo.label_smoothing={self.label_smoothing} applies only to dpo.loss=cdpo "
                             f"(got dpo.loss={self.loss}); set dpo.loss=cdpo or drop label_smoothing")
        return self


class LabelConfig(Section):
    """RLAIF labelling (`rlxf label`): k samples per prompt from ``model.path``, ranked by ``reward``
    (any verifier, the LLM judge, a reward model or a weighted mix), best vs worst written as a pair."""

    k: int = Field(4, ge=2, description="Responses sampled per prompt (at rollout.temperature, which must be > 0).")
    num_prompts: int | None = Field(
        None, ge=1, description="Label at most this many training prompts (default: all of the split)."
    )
    test_prompts: int = Field(
        0, ge=0, description="Also label this many held-out prompts into pairs_test.jsonl (an RM's held-out pairs)."
    )
    min_gap: float = Field(
        0.0, ge=0,
        description="Keep a prompt's pair only when best score - worst score > min_gap: a tie teaches nothing.",
    )
    batch_prompts: int = Field(32, ge=1, description="Prompts generated and scored together.")

"""Which RL algorithm: advantage estimator, policy loss, aggregation, KL, shaping.

``name`` picks a preset; every field the user sets explicitly wins over the preset.
The presets and the papers behind them:

- ``grpo``: group-relative advantages normalised by the group std, PPO-clip, per-sequence
  token mean (Shao et al. 2024, DeepSeekMath).
- ``dr_grpo``: GRPO without std normalisation and with a constant length normaliser
  (Liu et al. 2025, "Understanding R1-Zero-Like Training").
- ``dapo``: clip-higher (0.2 / 0.28), token-level loss, dynamic sampling, soft overlong
  penalty (Yu et al. 2025, DAPO).
- ``rloo``: leave-one-out baseline (Ahmadian et al. 2024, "Back to Basics").
- ``reinforce_pp``: REINFORCE++ global batch normalisation (Hu 2025).
- ``gspo``: sequence-level importance ratio and clipping (Zheng et al. 2025, GSPO).
- ``ppo``: a learned critic with GAE (Schulman et al. 2017; Ouyang et al. 2022).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from rlxf.config.base import Section

if TYPE_CHECKING:
    from rlxf.config.reward import RewardConfig

AlgorithmName = Literal["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "gspo", "ppo"]

# An off-policy correction's bound when the config sets none: verl's rollout_is_threshold
# default (its RolloutCorrectionConfig). decoupled has no entry: uncapped, as AReaL's default.
OFF_POLICY_DEFAULTS: dict[str, dict[str, Any]] = {"tis": {"is_cap": 2.0}, "mis": {"is_cap": 2.0}}

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {"advantage": "grpo", "norm_adv_by_std": True, "policy_loss": "ppo_clip",
             "loss_agg": "seq_mean_token_mean"},
    "dr_grpo": {"advantage": "grpo", "norm_adv_by_std": False, "policy_loss": "ppo_clip",
                "loss_agg": "seq_mean_token_sum_norm"},
    "dapo": {"advantage": "grpo", "norm_adv_by_std": True, "policy_loss": "ppo_clip",
             "loss_agg": "token_mean", "clip_eps_low": 0.2, "clip_eps_high": 0.28,
             "dynamic_sampling": True, "overlong_buffer": 0.25},
    "rloo": {"advantage": "rloo", "policy_loss": "ppo_clip", "loss_agg": "seq_mean_token_mean"},
    "reinforce_pp": {"advantage": "reinforce_pp", "policy_loss": "ppo_clip", "loss_agg": "token_mean"},
    "gspo": {"advantage": "grpo", "norm_adv_by_std": True, "policy_loss": "gspo",
             "loss_agg": "seq_mean_token_mean", "clip_eps_low": 3e-4, "clip_eps_high": 4e-4},
    "ppo": {"advantage": "gae", "policy_loss": "ppo_clip", "loss_agg": "token_mean"},
}


def preset_sources(data: Any) -> dict[str, str]:
    """The fields of a raw ``algorithm`` section that a preset fills in, each with the field that
    chose the preset: ``{name: dapo}`` -> ``{"overlong_buffer": "name", ...}``, ``{off_policy: tis}``
    -> ``{"is_cap": "off_policy"}``. An error about such a field points at the one that chose it."""
    if not isinstance(data, dict):
        return {}
    sources = {}
    for chooser, presets, default in (("name", PRESETS, "grpo"), ("off_policy", OFF_POLICY_DEFAULTS, "none")):
        chosen = data.get(chooser, default)
        if isinstance(chosen, str):
            sources.update({name: chooser for name in presets.get(chosen, {}) if name not in data})
    return sources


class AlgorithmConfig(Section):
    name: AlgorithmName = Field(
        "grpo", description="Algorithm preset; sets the defaults of the fields below (see module doc)."
    )
    advantage: str = Field(
        "grpo", description="Advantage estimator (registry name): gae, grpo, maxrl, rloo, reinforce_pp, "
        "reinforce_pp_baseline, reinforce, or one you registered."
    )
    norm_adv_by_std: bool = Field(
        True, description="GRPO: divide by the group's reward std (off = Dr.GRPO)."
    )
    policy_loss: str = Field(
        "ppo_clip", description="Policy loss (registry name): ppo_clip, dual_clip, gspo, cispo, vanilla."
    )
    loss_agg: str = Field(
        "seq_mean_token_mean",
        description="How token losses become one number: token_mean, seq_mean_token_mean, "
        "seq_mean_token_sum, seq_mean_token_sum_norm.",
    )
    loss_agg_norm: int | None = Field(
        None, ge=1,
        description="Constant normaliser for seq_mean_token_sum_norm; default rollout.max_new_tokens.",
    )
    clip_eps_low: float = Field(0.2, ge=0, description="PPO ratio clip below: 1 - eps_low.")
    clip_eps_high: float = Field(0.2, ge=0, description="PPO ratio clip above: 1 + eps_high (DAPO: 0.28).")
    dual_clip_c: float = Field(3.0, gt=1, description="Dual-clip bound c for negative advantages (Ye et al. 2020).")
    cispo_eps_high: float = Field(5.0, ge=0, description="CISPO: IS weight clipped at 1 + eps_high.")
    off_policy: str = Field(
        "none",
        description="Off-policy correction (registry name): none, tis, mis, decoupled, or one you "
        "registered. Weights each token's policy loss by a function of ρ = π_old/π_rollout, the "
        "trainer's over the engine's probability of the sampled token: `tis` min(ρ, is_cap) for an "
        "engine/trainer kernel mismatch, `mis` ρ or 0 outside [is_floor, is_cap], `decoupled` "
        "ρ (0 above is_cap, when set) for samples from older weights (async). docs/algorithms.md. "
        "Left unset under rollout.mode=async with max_staleness >= 1 it is tis (is_cap 2.0): measured "
        "to keep async's held-out accuracy at sync's (docs/async.md).",
    )
    is_cap: float | None = Field(
        None, gt=0,
        description="Upper bound C on ρ: tis truncates at it, mis and decoupled zero the tokens above "
        "it. Unset: 2.0 for tis and mis (verl's rollout_is_threshold), no cap for decoupled (AReaL's "
        "behav_imp_weight_cap default).",
    )
    is_floor: float | None = Field(
        None, gt=0, description="mis: lower bound on ρ, tokens below it are zeroed. Unset: 1 / is_cap (verl).",
    )
    is_level: Literal["token", "sequence", "geometric"] = Field(
        "token",
        description="ρ per token; per sequence (the product over its tokens); or the sequence's "
        "geometric mean. The last two weigh (and mis keeps or drops) whole sequences.",
    )
    kl_coef: float = Field(
        0.0, ge=0, description="KL penalty coefficient β toward the reference model; 0 loads no reference."
    )
    ptx_coef: float = Field(
        0.0, ge=0,
        description="PPO-ptx (InstructGPT, Ouyang et al. 2022): add ptx_coef x the mean NLL per token of a "
        "batch of demonstrations from data.ptx to each optimizer step's policy loss, so skills the RL "
        "prompts do not reward are kept. 0 = off (data.ptx is then not read).",
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator (Schulman 2020): k1 = log-ratio, k2 = squared/2, k3 = unbiased, positive."
    )
    kl_mode: Literal["loss", "reward"] = Field(
        "loss", description="`loss`: add β·KL to the loss (GRPO). `reward`: subtract β·KL from per-token rewards (PPO/RLHF)."
    )
    kl_target: float | None = Field(
        None, gt=0, description="Adaptive KL controller target (Ziegler et al. 2019), per token: the mean KL "
        "estimate over response tokens (TRL's and Ziegler's targets, e.g. 6 nats, are per sequence: divide by "
        "the typical response length); None = fixed β."
    )
    kl_horizon: int = Field(10000, ge=1, description="Adaptive KL controller horizon in samples.")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient.")
    gamma: float = Field(1.0, ge=0, le=1, description="Discount γ (GAE, REINFORCE++).")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE λ.")
    value_clip: float | None = Field(
        0.2, gt=0, description="PPO value clipping range around the old values; None = off."
    )
    dynamic_sampling: bool = Field(
        False, description="DAPO: drop groups whose rewards are all equal and sample more to refill the batch."
    )
    max_sampling_rounds: int = Field(
        4, ge=1, description="Dynamic sampling: most rollout rounds per step before training on what is there."
    )
    overlong_buffer: float = Field(
        0.0, ge=0, lt=1,
        description="DAPO soft overlong penalty: fraction of max_new_tokens at the end where the "
        "reward falls linearly to -overlong_penalty (0 = off).",
    )
    overlong_penalty: float = Field(1.0, ge=0, description="DAPO soft overlong penalty at max length.")
    mask_truncated: bool = Field(
        False,
        description="Overlong filtering (DAPO, Yu et al. 2025; TRL's mask_truncated_completions): a response "
        "cut off at rollout.max_new_tokens (finish_reason length; with an environment, an episode it did "
        "not terminate) trains nothing: its tokens leave the policy, KL, entropy and value losses and "
        "their denominators. It still counts in the reward metrics and in its group's baseline "
        "(docs/algorithms.md). Metric response/truncated_masked_frac.",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict):
            # the field before off_policy: its default (None, off) is in every earlier run's config.yaml
            if data.get("tis_cap", None) is not None:
                raise ValueError("algorithm.tis_cap is now algorithm.off_policy: tis with "
                                 f"algorithm.is_cap: {data['tis_cap']} (see docs/algorithms.md)")
            data = {k: v for k, v in data.items() if k != "tis_cap"}
            # a name that is not text (a list, a mapping) is left to the field's own check, which
            # names it and the valid ones; looked up in a dict it would raise TypeError
            name = data.get("name", "grpo")
            if isinstance(name, str) and name in PRESETS:
                data = {**PRESETS[name], **data}
            off_policy = data.get("off_policy", "none")
            if isinstance(off_policy, str):
                data = {**OFF_POLICY_DEFAULTS.get(off_policy, {}), **data}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> AlgorithmConfig:
        if self.kl_target is not None and self.kl_coef == 0:
            raise ValueError("algorithm.kl_target needs algorithm.kl_coef > 0 (the controller's starting β)")
        if self.off_policy == "none" and (self.is_cap is not None or self.is_floor is not None):
            raise ValueError("algorithm.is_cap / is_floor bound an off-policy correction, but "
                             "algorithm.off_policy is none: choose tis, mis or decoupled, or drop them")
        if self.off_policy in ("tis", "mis") and self.is_cap is None:
            raise ValueError(f"algorithm.off_policy={self.off_policy} needs algorithm.is_cap (2.0 when left "
                             f"unset); for the uncapped weight use off_policy: decoupled")
        if self.is_floor is not None and self.is_cap is not None and self.is_floor > self.is_cap:
            raise ValueError(f"algorithm.is_floor ({self.is_floor}) must not exceed algorithm.is_cap ({self.is_cap})")
        return self

    def negative_return_problems(self, reward: RewardConfig | None = None) -> list[tuple[tuple, str]]:
        """The settings that subtract from the returns, as ``(location, message)`` problems: this
        section's, and ``reward``'s verifiers that can score below 0 when they make the returns.

        They matter to an advantage estimator registered with ``Needs(nonnegative_returns=True)``
        (maxrl divides by the group's mean return, a pass rate). Which estimators those are is the
        registry's to say, once the plugins are imported: ``check_names`` asks it and reports
        these, so a plugin with that need is checked as maxrl is, whatever its name."""
        why = f"algorithm.advantage={self.advantage!r} needs every sample's return >= 0"
        problems = []
        if self.kl_coef > 0 and self.kl_mode == "reward":
            problems.append((("algorithm", "kl_mode"), f"{why}, and kl_mode: reward subtracts the KL penalty "
                             f"(algorithm.kl_coef) from them: use kl_mode: loss"))
        if self.overlong_buffer > 0 and self.overlong_penalty > 0:
            preset = (f", algorithm.name: {self.name}'s value"
                      if PRESETS[self.name].get("overlong_buffer") == self.overlong_buffer else "")
            problems.append((("algorithm", "overlong_buffer"), f"{why}, and the overlong penalty "
                             f"(algorithm.overlong_buffer={self.overlong_buffer:g}{preset}) subtracts from them: "
                             f"set overlong_buffer: 0"))
        return problems + (reward.negative_reward_problems(why) if reward is not None else [])

"""Multi-turn environments (``env:``): when set, every rollout is an episode of an environment."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlxf.config.base import Section


class EnvConfig(Section):
    name: str = Field(
        ...,
        description="The environment: a built-in name (`guess_number`, `tool_arithmetic`, `single_turn`) or "
        "your own class as `package.module:Class` (see rlxf.envs.base.Env). Each episode gets a fresh one.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the environment's constructor."
    )
    tools: list[str] = Field(
        default_factory=list,
        description="Tools offered to the model, for environments whose constructor takes `tools` (a "
        "rlxf.envs.tools.ToolSet; built-in: `tool_arithmetic`): `calculator`, `python` (runs in the code sandbox), or your own function as "
        "`package.module:function` (its JSON schema is taken from its signature and docstring).",
    )
    max_turns: int = Field(8, ge=1, description="Most model turns in one episode.")
    max_total_tokens: int = Field(
        1024, ge=2,
        description="Most tokens in one episode (first observation + every turn); an episode reaching it ends "
        "(truncated). Each turn may generate up to min(rollout.max_new_tokens, what is left).",
    )
    step_timeout_s: float = Field(
        30.0, gt=0, description="Longest an environment's reset or step (tool calls included) may take; "
        "past it the episode ends with a recorded error.",
    )
    credit: Literal["episode", "per_turn"] = Field(
        "episode",
        description="`episode`: the episode return (sum of turn rewards) is the outcome reward, on the last "
        "model token, so group estimators (GRPO, RLOO) give every model token the same advantage. "
        "`per_turn`: each turn's reward lands on that turn's last model token, so reward-to-go estimators "
        "(reinforce_pp, reinforce, PPO's GAE) give turn k's tokens the return of turns k, k+1, ...; group "
        "estimators sum them and see the episode return either way.",
    )
    use_verifiers: bool = Field(
        False,
        description="Also score each episode's last model turn with the `reward:` verifiers and add their "
        "reward to the episode return (they see the whole conversation in metadata['conversation']).",
    )

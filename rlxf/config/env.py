"""Multi-turn environments (``env:``): when set, every rollout is an episode of an environment,
or of an agent program talking to the policy through an OpenAI-compatible endpoint."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlxf.config.base import Section


class EnvConfig(Section):
    name: str | None = Field(
        None,
        description="The environment: a built-in name (`guess_number`, `tool_arithmetic`, `single_turn`, "
        "`gymnasium` for another package's text environment: options {id, kwargs}) or "
        "your own class as `package.module:Class` (see rlxf.envs.base.Env). Each episode gets a fresh one. "
        "Leave it unset when an agent program runs the episodes (`agent` / `agent_command`).",
    )
    agent: str | None = Field(
        None,
        description="An agent program that runs each episode itself, as `package.module:function` called "
        "`function(base_url, task) -> reward` in a thread per episode: it talks to the policy with any OpenAI "
        "client at `base_url` (the episode's own /v1 on loopback), `task` is a rlxf.envs.EnvTask, and it returns "
        "the episode's reward (a number, or a dict with `reward` and optionally `success` and other infos). "
        "rlxf records every model turn's exact token ids, log-probs and versions (rlxf.envs.programs); requests "
        "may carry `tools`, `stream` and `logprobs`, and what cannot be recorded as asked (n > 1, penalties, a forced "
        "tool call) is a 400 saying why.",
    )
    agent_command: list[str] | None = Field(
        None,
        description="An agent program as a command run once per episode (e.g. [python, my_agent.py]), with "
        "OPENAI_BASE_URL (the episode's own endpoint), OPENAI_API_KEY and RLXF_TASK (the task as JSON) in its "
        "environment; the last line of its stdout is the reward (a number, or a JSON object as for `agent`). "
        "A nonzero exit or a timeout ends the episode with a recorded error.",
    )
    agent_timeout_s: float = Field(
        300.0, gt=0,
        description="Longest one episode of an agent program may take; past it the episode ends with a recorded "
        "error (a command is killed; a function's thread is abandoned).",
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
    tool_description: Literal["schema", "compact"] = Field(
        "schema",
        description="How an environment with `tools` describes them in the system prompt: `schema` lists each "
        "tool's JSON schema (what tool-using chat templates show); `compact` one `name(arg: type): description` "
        "line per tool (the calculator: 92 prompt tokens instead of 260 with rlxf's built-in tokenizer), for "
        "models so small that prompt length is most of their compute. The `<tool_call>` format is the same.",
    )
    max_turns: int = Field(8, ge=1, description="Most model turns in one episode; an episode still going after "
                           "them ends as `max_turns` (the share of each step's episodes: env/end/max_turns).")
    max_total_tokens: int = Field(
        1024, ge=2,
        description="Most tokens in one episode (first observation + every turn); an observation that would leave "
        "no room for another model token ends the episode unappended, as `max_total_tokens` (env/end/max_total_tokens; "
        "`truncated` is the environment's own cut). Each turn may generate up to min(rollout.max_new_tokens, what is left).",
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

    @model_validator(mode="after")
    def _one_driver(self) -> EnvConfig:
        drivers = [k for k in ("name", "agent", "agent_command") if getattr(self, k)]
        if len(drivers) != 1:
            raise ValueError("set exactly one of env.name (an environment), env.agent (a Python agent program) "
                             f"and env.agent_command (an agent program as a command); got {drivers or 'none'}")
        if self.tools and self.name is None:
            raise ValueError("env.tools are offered by an environment (env.name); an agent program runs its own tools")
        return self

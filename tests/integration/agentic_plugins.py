"""A user-side environment for the agentic end-to-end tests (`agentic_plugins:DigitsEnv`)."""

from __future__ import annotations

from rlxf.envs import EnvTask, StepResult


class DigitsEnv:
    """Two turns; each turn's reward is the fraction of its characters that are digits (dense, so
    every GRPO group carries signal from a random model)."""

    def __init__(self, turns: int = 2):
        self.turns, self.seen = turns, 0

    def reset(self, task: EnvTask):
        return [{"role": "user", "content": f"Say numbers ({task.uid})."}]

    def step(self, action: str) -> StepResult:
        self.seen += 1
        reward = sum(c.isdigit() for c in action) / max(1, len(action))
        done = self.seen >= self.turns
        return StepResult([] if done else [{"role": "user", "content": "More numbers."}], reward=reward,
                          terminated=done, info={"success": reward > 0.5})


class BrokenEnv(DigitsEnv):
    """DigitsEnv whose episodes fail by the task's seed: reset raises, step raises, or step returns garbage."""

    def reset(self, task: EnvTask):
        self.fault = task.seed % 4
        if self.fault == 1:
            raise RuntimeError("reset broke")
        return super().reset(task)

    def step(self, action: str):
        if self.fault == 2:
            raise RuntimeError("step broke")
        if self.fault == 3:
            return {"reward": 1.0}
        return super().step(action)


class AlwaysBrokenEnv(DigitsEnv):
    """DigitsEnv whose every step raises: no episode of any step can end well."""

    def step(self, action: str):
        raise NameError("name 'undefined_helper' is not defined")


def guess_agent(base_url: str, task: EnvTask) -> dict:
    """An agent program written against the official OpenAI client only: it plays the guessing
    game (the game's rules are its own business, here borrowed from rlxf's environment)."""
    from openai import OpenAI

    from rlxf.envs import build_env

    env = build_env("guess_number", {"low": 1, "high": 8})
    messages = env.reset(task)
    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    total = 0.0
    for _ in range(3):
        reply = client.chat.completions.create(model="rlxf-policy", messages=messages, max_tokens=6,
                                               temperature=0.0)   # the rollout's sampling wins in training
        text = reply.choices[0].message.content
        messages.append({"role": "assistant", "content": text})
        result = env.step(text)
        total += result.reward
        if result.terminated:
            return {"reward": total, "success": True}
        messages += result.observation
    return {"reward": total, "success": False}


def digits_agent(base_url: str, task: EnvTask) -> float:
    """Two turns through the OpenAI client; the reward is the fraction of digits the model wrote."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    messages = [{"role": "user", "content": f"Say numbers ({task.uid})."}]
    said = ""
    for _ in range(2):
        text = client.chat.completions.create(model="m", messages=messages).choices[0].message.content
        said += text
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "More numbers."}]
    return sum(c.isdigit() for c in said) / max(1, len(said))


def calculator_agent(base_url: str, task: EnvTask) -> float:
    """The tool_arithmetic game through the OpenAI client: the first messages are the environment's
    (its tools described in the system prompt), each returned tool_call is answered as OpenAI's
    docs do (its id and the result, no name), and the reply is right when its last number is."""
    import json

    from openai import OpenAI

    from rlxf.envs import build_env
    from rlxf.envs.builtin import last_integer
    from rlxf.envs.tools import ToolSet, calculator

    messages = build_env("tool_arithmetic", {"tools": ToolSet(["calculator"])}).reset(task)
    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    for _ in range(3):
        message = client.chat.completions.create(model="rlxf-policy", messages=messages).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return float(last_integer(message.content) == int(task.ground_truth))
        for call in message.tool_calls:
            result = calculator(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0.0

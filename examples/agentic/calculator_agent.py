"""An agent program that knows only the OpenAI chat API: it answers an arithmetic question with a
calculator tool, and is trained by rlxf as it is (examples/agentic/tool_arithmetic_agent.yaml).

    env: {agent: calculator_agent:run}                      # called in-process, once per episode
    env: {agent_command: [python, examples/agentic/calculator_agent.py]}   # or as a program, once per episode (a path from the working directory)

rlxf gives each episode its own base URL (an OpenAI-compatible endpoint on loopback serving the
policy being trained) and records the exact tokens of every model turn; what this program
returns is the episode's reward. The tool is offered as OpenAI's `tools=` schema: rlxf renders it
through the model's chat template (or, for a template without tool support, into the system
message as its own tool environments do). Nothing here is rlxf's but the calculator it borrows.
"""

from __future__ import annotations

import json
import os
import re

from openai import OpenAI

from rlxf.envs.tools import calculator

SYSTEM = "Use the calculator to compute, then give the final answer as a number."
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression exactly.",
    "parameters": {"type": "object", "required": ["expression"], "properties": {
        "expression": {"type": "string", "description": 'Numbers with + - * / // % ** and parentheses, e.g. "(12+34)*56".'}}}}}


def run(base_url: str, task) -> dict:
    """One episode: ask, run the calculator for each tool call, score the final answer."""
    client = OpenAI(base_url=base_url, api_key="unused")
    question = task.prompt if not isinstance(task, dict) else task["prompt"]
    answer = task.ground_truth if not isinstance(task, dict) else task["ground_truth"]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    for _ in range(3):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR], max_tokens=64)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            numbers = re.findall(r"-?\d+", message.content or "")
            solved = bool(numbers) and numbers[-1] == str(answer)
            return {"reward": float(solved), "success": solved}
        for call in message.tool_calls:
            try:
                result = calculator(**json.loads(call.function.arguments))
            except Exception as e:  # noqa: BLE001 - the model sees its mistake
                result = f"error: {e}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return {"reward": 0.0, "success": False}


if __name__ == "__main__":   # as env.agent_command: OPENAI_BASE_URL and RLXF_TASK come from rlxf
    print(json.dumps(run(os.environ["OPENAI_BASE_URL"], json.loads(os.environ["RLXF_TASK"]))))

"""Environments, tools and agent programs that push the agent loop's limits
(``test_agentic_limits.py``): long tool output, refused first observations, environments that
break after paying, few-shot first observations, tools that call ``sys.exit()``."""

from __future__ import annotations

import sys

from rlxf.envs import EnvTask, StepResult

DOCUMENT = "1 2 3 4 5 6 7 8 9 " * 300    # far more tokens than any limit the tests set


def long_text(topic: str) -> str:
    """Look a topic up: returns a long document.

    Args:
        topic: What to look up.
    """
    return DOCUMENT


def exits(code: int) -> str:
    """A wrapped command line tool whose main() ends in sys.exit().

    Args:
        code: Its exit status.
    """
    sys.exit(code)


class LookupEnv:
    """Runs the ``long_text`` tool for the model every turn (as if it had called it), so each
    observation is a long tool message."""

    def __init__(self, tools=None):
        self.tools, self.turn = tools, 0

    def reset(self, task: EnvTask):
        return [{"role": "user", "content": "Say numbers."}]

    def step(self, action: str) -> StepResult:
        used = self.tools.run('<tool_call>{"name": "long_text", "arguments": {"topic": "x"}}</tool_call>',
                              turn=self.turn)
        self.turn += 1
        return StepResult(used.messages, reward=0.5)


class TwoUsersFirstEnv:
    """Episodes of prompts with ``metadata["two_users"]`` start with two user messages in a row
    (which a template requiring alternating roles refuses); the others with one. One turn, reward 1."""

    def reset(self, task: EnvTask):
        if task.metadata.get("two_users"):
            return [{"role": "user", "content": "Context."}, {"role": "user", "content": "Say numbers."}]
        return [{"role": "user", "content": "Say numbers."}]

    def step(self, action: str) -> StepResult:
        return StepResult([], reward=1.0, terminated=True)


class PaysThenBreaksEnv:
    """Turn 1 pays 1 with ``success`` True; turn 2's step raises (the environment broke)."""

    def reset(self, task: EnvTask):
        self.turn = 0
        return [{"role": "user", "content": "Say numbers."}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        if self.turn == 2:
            raise RuntimeError("environment crashed")
        return StepResult([{"role": "user", "content": "More."}], reward=1.0, info={"success": True})


FEW_SHOT = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "2+2="},
            {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+4="}]


class FewShotEnv:
    """The first observation is a few-shot conversation (an assistant message before the last
    user message); one turn, reward 1 when the model says 7."""

    def reset(self, task: EnvTask):
        return [dict(m) for m in FEW_SHOT]

    def step(self, action: str) -> StepResult:
        return StepResult([], reward=float(action.strip() == "7"), terminated=True)


class EndsWithAssistantEnv(FewShotEnv):
    """A first observation whose last message is the assistant's: still refused."""

    def reset(self, task: EnvTask):
        return [dict(m) for m in FEW_SHOT[:3]]


class ExitingEnv:
    """Its step calls sys.exit() (a wrapped command line tool's main())."""

    def reset(self, task: EnvTask):
        return [{"role": "user", "content": "Say numbers."}]

    def step(self, action: str) -> StepResult:
        sys.exit(3)


def few_shot_agent(base_url: str, task: EnvTask) -> float:
    """``FewShotEnv``'s episode as an agent program: the same first messages, one turn."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    text = client.chat.completions.create(model="m", messages=FEW_SHOT).choices[0].message.content
    return float(text.strip() == "7")


def pasting_agent(base_url: str, task: EnvTask) -> dict:
    """Turn 1 as usual; then pastes a long document (a tool's output) and asks again, which the
    endpoint refuses (max_total_tokens); then tries a short message, refused too (the episode has
    ended). Returns the refusals' messages."""
    from openai import BadRequestError, OpenAI

    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    messages = [{"role": "user", "content": "Say numbers."}]
    text = client.chat.completions.create(model="m", messages=messages).choices[0].message.content
    messages.append({"role": "assistant", "content": text})
    refusals = []
    for content in (DOCUMENT, "Just one more."):
        try:
            client.chat.completions.create(model="m", messages=messages + [{"role": "user", "content": content}])
        except BadRequestError as e:
            refusals.append(str(e))
    return {"reward": 1.0, "refusals": refusals}


def long_first_agent(base_url: str, task: EnvTask) -> float:
    """Starts with a first request longer than any limit: refused, nothing recorded."""
    from openai import BadRequestError, OpenAI

    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": DOCUMENT}])
    except BadRequestError:
        pass
    return 1.0


def paid_then_crashed_agent(base_url: str, task: EnvTask) -> float:
    """One model turn, then the program crashes."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="rlxf", max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say numbers."}])
    raise RuntimeError("agent crashed after its turn")

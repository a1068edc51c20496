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

"""Multi-turn environments: the Env protocol, built-in environments, tools, and the agent loop.

    from rlxf.envs import Env, EnvTask, StepResult, register_env

    @register_env("echo")
    class Echo:
        def reset(self, task: EnvTask): return [{"role": "user", "content": task.prompt}]
        def step(self, action: str): return StepResult([], reward=float("yes" in action), terminated=True)

Select one in a config with ``env: {name: my_envs:Echo}`` (the class, ``package.module:Class``),
or by its registered name with the module listed in ``plugins:`` so that it is imported
(``plugins: [my_envs]`` and ``env: {name: echo}``); see ``rlxf.config.env.EnvConfig`` and
``examples/agentic/``.
"""

from rlxf.envs.base import Env, EnvError, EnvTask, Message, StepResult, build_env, env_names, register_env
from rlxf.envs.tokens import Conversation, TemplateAppendError, TokenBoundaryError

__all__ = ["Conversation", "Env", "EnvError", "EnvTask", "Message", "StepResult", "TemplateAppendError",
           "TokenBoundaryError", "build_env", "env_names", "register_env"]

"""User-side tools and environments for the envs tests (imported as `env_plugins:name`)."""

from __future__ import annotations

import threading

HANG = threading.Event()


def word_count(text: str, minimum: int = 1) -> int:
    """Count the words of a text.

    Args:
        text: The text to count.
        minimum: Only count words at least this long.
    """
    return sum(len(w) >= minimum for w in text.split())


def explode(x: int) -> int:
    """Always fails.

    Args:
        x: Anything.
    """
    raise RuntimeError("tool crashed")


def garbage(x: int) -> object:
    """Returns something that is not JSON.

    Args:
        x: Anything.
    """
    return object()


def hang(x: int) -> int:
    """Never returns (until the test releases it).

    Args:
        x: Anything.
    """
    HANG.wait(60)
    return x


def undocumented(x):
    return x



OPEN: list[object] = []   # the HoldingEnv objects made and not yet closed


class HoldingEnv:
    """Holds something from its constructor on (a process, a browser) until ``close()``; its reset
    raises for the ground truth "bad"."""

    def __init__(self):
        OPEN.append(self)

    def reset(self, task):
        if task.ground_truth == "bad":
            raise RuntimeError("no such level")
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        from rlxf.envs import StepResult

        return StepResult([], reward=1.0, terminated=True)

    def close(self):
        OPEN.remove(self)

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


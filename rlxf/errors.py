"""The one base class of errors caused by user input, and where user code raised.

A config, a data file, a model path or a command-line argument that cannot work raises a
subclass of ``UserInputError``; the CLI turns it into exit code 2 and prints its message,
which says what was wrong, where, and what to do. Everything else is a runtime failure
(exit code 1).
"""

import importlib
import logging
import os
from collections.abc import Callable, Iterable

log = logging.getLogger("rlxf")
_RLXF_DIR = os.path.dirname(os.path.abspath(__file__))          # rlxf's own frames are not the user's
_IMPORTLIB_DIR = os.path.dirname(os.path.abspath(importlib.__file__))   # nor the import machinery's


class UserInputError(ValueError):
    """Bad input from the user: config, data, paths, arguments."""


class MissingExtraError(UserInputError, ImportError):
    """What the config or command asks for needs an optional dependency that is not installed; the
    message names the ``pip install 'rlxf[extra]'`` that adds it. An ImportError too, for code
    that catches that."""


def raised_at(e: BaseException, *, outside_rlxf: bool = False) -> str | None:
    """``file:line in function`` of the deepest frame of ``e``'s traceback: the line that raised
    (a user's environment, tool or plugin). ``outside_rlxf``: the deepest frame outside rlxf and
    the import machinery, i.e. the user's line that called rlxf when rlxf raised (a ``@register``
    whose name is taken). None when there is no such frame."""
    import traceback  # noqa: PLC0415 - only on the error path

    skip = ("<frozen", _RLXF_DIR + os.sep, _IMPORTLIB_DIR + os.sep)
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not (outside_rlxf and f.filename.startswith(skip))]
    return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else None


def _note(exc: BaseException, text: str) -> None:
    """``exc.add_note(text)`` where Python has it (3.11+); the log line says it on 3.10."""
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(text)


def close_all(closers: Iterable[Callable[[], object]]) -> None:
    """Call every closer, also after one fails (a reward pool that fails to close must not leave
    the engine's process running); then raise the first failure, the later ones noted on it."""
    first: Exception | None = None
    for close in closers:
        try:
            close()
        except Exception as err:
            if first is None:
                first = err
            else:
                log.warning("closing failed too: %s: %s", type(err).__name__, err)
                _note(first, f"closing failed too: {type(err).__name__}: {err}")
    if first is not None:
        raise first


def close_during(exc: BaseException, close: Callable[[], object], what: str) -> None:
    """``close()`` while ``exc`` is in flight: a failure of the cleanup is logged and noted on
    ``exc`` instead of replacing it, so the caller sees the cause, not a cleanup's symptom."""
    try:
        close()
    except Exception as err:
        log.warning("%s failed while handling %s: %s: %s", what, type(exc).__name__, type(err).__name__, err)
        _note(exc, f"{what} then failed too: {type(err).__name__}: {err}")

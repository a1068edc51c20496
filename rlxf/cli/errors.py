"""Map failures to exit codes and messages a user can act on."""

from __future__ import annotations

import os
import sys
import traceback

import click
import typer

from rlxf.errors import UserInputError


class UsageError(UserInputError):
    """Bad input from the user (exit code 2): a config, a path, an argument."""


def _click_classes() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(Exit, Abort, ClickException) of click and of typer, which vendors its own copy of click."""
    exits = [click.exceptions.Exit, *(getattr(typer, "Exit", ()),)]
    aborts = [click.exceptions.Abort, *(getattr(typer, "Abort", ()),)]
    errors: list[type] = [click.ClickException]
    try:
        from typer._click.exceptions import ClickException
    except ImportError:  # typer without a vendored click raises click's own classes
        pass
    else:
        errors.append(ClickException)
    return tuple(exits), tuple(aborts), tuple(errors)


def run_app(app: typer.Typer, args: list[str]) -> int:
    exit_types, abort_types, usage_types = _click_classes()
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="rlxf", standalone_mode=False)
    except exit_types as e:
        return e.exit_code
    except abort_types:
        print("aborted", file=sys.stderr)
        return 1
    except usage_types as e:  # bad usage: unknown command or option, missing argument
        e.show()
        option = getattr(e, "option_name", None) or ""
        if option.startswith("-") and "." in option:  # `--rollout.n=8`: an override written as an option
            print(f"Config overrides take no dashes: write {option.lstrip('-')}=VALUE after the config file.",
                  file=sys.stderr)
        return 2
    except UserInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the last line of defence: say what failed
        if os.environ.get("RLXF_DEBUG"):
            traceback.print_exc()
        else:
            print(f"error: {type(e).__name__}: {e}\n(set RLXF_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0

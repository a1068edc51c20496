"""The `rlxf` command line. Each command lives in its own module and imports lazily,
so `rlxf --help` is fast and a command pays only for what it uses.

Exit codes: 0 ok, 2 bad usage or config, 1 runtime failure.
"""

from __future__ import annotations

import sys

import typer

from rlxf.cli import commands

app = typer.Typer(
    name="rlxf",
    help="rlxf: reinforcement learning for large language models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
commands.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, map errors to exit codes (2 usage/config, 1 runtime)."""
    from rlxf.cli.errors import run_app

    return run_app(app, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())

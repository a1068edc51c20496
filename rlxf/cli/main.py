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
    # plain help: typer's rich help labels every on/off flag "<bool>", as if it took a value
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        import rlxf

        print(f"rlxf {rlxf.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print rlxf's version and exit."),
) -> None:
    """rlxf: reinforcement learning for large language models."""


commands.register(app)


def _escape_unencodable() -> None:
    """Print what the terminal's encoding cannot show as ``\\xfc`` escapes instead of failing: on
    an ASCII or Latin-1 stdout (``PYTHONIOENCODING=ascii``, a legacy locale) a model's reply or a
    prompt with ``ü`` would otherwise end the command after its work was done."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and (stream.encoding or "").lower().replace("-", "") != "utf8":
            reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, map errors to exit codes (2 usage/config, 1 runtime)."""
    from rlxf.cli.errors import run_app

    _escape_unencodable()
    return run_app(app, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())

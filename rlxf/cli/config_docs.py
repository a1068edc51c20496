"""`rlxf config-docs [SECTION]`"""

from __future__ import annotations

from rlxf.cli.errors import UsageError


def run(section: str | None) -> None:
    from rlxf.config.docs import render

    try:
        print(render(section))
    except KeyError as e:
        raise UsageError(e.args[0]) from None

"""`rlxf config-docs [SECTION]`"""

from __future__ import annotations

from rlxf.cli.errors import UsageError


def run(section: str | None) -> None:
    from rlxf.config.docs import render
    from rlxf.data.tasks import task_option_models

    try:
        print(render(section, task_options=task_option_models()))
    except KeyError as e:
        raise UsageError(e.args[0]) from None

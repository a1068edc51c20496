"""Every curve report.html draws is one rlxf logs: a plot key no code writes is an empty panel
(the critic's value-clip fraction was asked for as ``critic/clipfrac`` while the critic logs
``critic/vf_clipfrac``)."""

from __future__ import annotations

from pathlib import Path

import rlxf
from rlxf.metrics.report import PLOTS

SOURCE = "\n".join(p.read_text() for p in Path(rlxf.__file__).parent.rglob("*.py")
                   if p.name not in ("report.py", "report_plots.py"))


def _logged(key: str) -> bool:
    """The key as a literal; or, for a family built with a prefix (``f"{prefix}/{k}"`` over a
    dict of metrics, ``f"{prefix}pass@k"``), its name as a literal, an f-string's end or a keyword
    argument, and its prefix as a literal."""
    if f'"{key}"' in SOURCE:
        return True
    prefix, _, name = key.rpartition("/")
    return bool(prefix) and any(form in SOURCE for form in (f'"{name}"', f'}}{name}"', f"{name}=")) and f'"{prefix}' in SOURCE


def test_every_plotted_key_is_logged_somewhere():
    missing = [key for plot in PLOTS for key in plot.keys if not _logged(key)]
    assert missing == []

"""`rlxf report RUN_DIR...`"""

from __future__ import annotations

from pathlib import Path

from rlxf.cli.errors import UsageError


def run(run_dirs: list[Path], out: Path | None) -> None:
    from rlxf.metrics.report import write_report

    for d in run_dirs:
        if not (d / "metrics.jsonl").exists():
            raise UsageError(f"{d} has no metrics.jsonl: pass a run directory such as runs/<name>")
    path = write_report(run_dirs, out)
    print(f"wrote {path}")

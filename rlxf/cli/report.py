"""`rlxf report RUN_DIR...`"""

from __future__ import annotations

from pathlib import Path

from rlxf.cli.errors import UsageError


def run(run_dirs: list[Path], out: Path | None) -> None:
    from rlxf.metrics.report import write_report

    for d in run_dirs:
        if not (d / "metrics.jsonl").exists():
            raise UsageError(f"{d} has no metrics.jsonl: pass a run directory such as runs/<name>")
    if out is not None and out.is_dir():
        raise UsageError(f"--out {out} is a directory; give the HTML file to write, e.g. --out {out / 'report.html'}")
    try:
        path = write_report(run_dirs, out)
    except OSError as e:
        raise UsageError(f"cannot write the report to {e.filename or out}: {e.strerror or e}; "
                         f"give another --out") from None
    print(f"wrote {path}")

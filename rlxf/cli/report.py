"""`rlxf report RUN_DIR...`"""

from __future__ import annotations

import sys
from pathlib import Path

from rlxf.cli.errors import UsageError


def run(run_dirs: list[Path], out: Path | None) -> None:
    from rlxf.metrics.report import write_report
    from rlxf.metrics.sinks import read_jsonl

    seen: dict[Path, Path] = {}
    for d in run_dirs:
        if not (d / "metrics.jsonl").is_file():
            raise UsageError(_not_a_run(d))
        if (same := seen.setdefault(d.resolve(), d)) is not d:  # one run overlaid on itself compares nothing
            alias = f" ({same} is the same directory)" if str(same) != str(d) else ""
            raise UsageError(f"{d} is given twice{alias}; give each run directory once")
    if out is not None and out.is_dir():
        raise UsageError(f"--out {out} is a directory; give the HTML file to write, e.g. --out {out / 'report.html'}")
    try:
        path = write_report(run_dirs, out)
    except OSError as e:
        raise UsageError(f"cannot write the report to {e.filename or out}: {e.strerror or e}; "
                         f"give another --out") from None
    print(f"wrote {path}")
    for d in run_dirs:
        if not read_jsonl(d / "metrics.jsonl"):  # a run stopped before its first step: the page is empty
            print(f"note: {d}/metrics.jsonl holds no metrics yet (no step finished), so its curves are empty",
                  file=sys.stderr)


def _not_a_run(path: Path) -> str:
    """Why ``path`` is not a run directory, and the run directory it may have meant: the one
    above a file or a checkpoint inside a run (``runs/x/metrics.jsonl``, ``runs/x/checkpoints/step_2``)."""
    run = next((p for p in path.parents if (p / "metrics.jsonl").is_file()), None)
    hint = f"; did you mean its run directory {run}?" if run is not None else "; pass a run directory such as runs/<name>"
    if not path.exists():
        return f"{path} does not exist; pass a run directory such as runs/<name>"
    if not path.is_dir():
        return f"{path} is a file, not a run directory{hint}"
    return f"{path} has no metrics.jsonl, so it is not a run directory{hint}"

"""`rlxf report RUN_DIR...`"""

from __future__ import annotations

import sys
from pathlib import Path

from rlxf.cli.errors import UsageError


def run(run_dirs: list[Path], out: Path | None) -> None:
    from rlxf.metrics.report import write_report
    from rlxf.metrics.sinks import iter_jsonl

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
        if next(iter_jsonl(d / "metrics.jsonl"), None) is None:  # a run stopped before its first step: no curves
            print(f"note: {d}/metrics.jsonl holds no metrics yet (no step finished), so its curves are empty",
                  file=sys.stderr)


def _not_a_run(path: Path) -> str:
    """Why ``path`` is not a run directory, and the run directory it may have meant: the one
    above a file or a checkpoint inside a run (``runs/x/metrics.jsonl``, ``runs/x/checkpoints/step_2``)."""
    from rlxf.run_dir import looks_like_run, recorded_command

    # the folders above: ".." and "." name none of theirs (the lexical parent of ".." is ".", below it)
    above = (path.resolve() if ".." in path.parts or path.name == "" else path).parents
    run = next((p for p in above if (p / "metrics.jsonl").is_file()), None)
    hint = f"; did you mean its run directory {run}?" if run is not None else "; pass a run directory such as runs/<name>"
    if not path.exists():
        return f"{path} does not exist; pass a run directory such as runs/<name>"
    if not path.is_dir():
        return f"{path} is a file, not a run directory{hint}"
    if looks_like_run(path):  # "not a run directory" said of a run still loading its model, or of `rlxf label`'s
        if (command := recorded_command(path)) == "label":
            return (f"{path} is a run of `rlxf label`, which writes preference pairs (pairs_*.jsonl), not metrics; "
                    f"report the `rlxf rm` or `rlxf dpo` run trained on them")
        return (f"{path} is a run directory{f' of `rlxf {command}`' if command else ''} with no metrics.jsonl yet: "
                f"its start has not reached the first step (or failed; see {path / 'train.log'}); report it once "
                f"it has begun")
    if inside := sorted(str(m.parent) for m in path.glob("*/metrics.jsonl")):  # `rlxf report runs`
        more = f" and {len(inside) - 5} more" if len(inside) > 5 else ""
        hint = f"; it holds the runs {', '.join(inside[:5])}{more}: pass one, or several to compare them"
    return f"{path} has no metrics.jsonl, so it is not a run directory{hint}"

"""`rlxf train CONFIG [OVERRIDES] [--resume | --overwrite]`"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

from rlxf.cli.errors import UsageError

# Fields a resumed run may change: how long it runs and what it logs, never what it learns.
RESUMABLE_CHANGES = ("train.steps", "logging.", "eval.", "checkpoint.", "run.threads")


def _diff(a, b, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def check_resume_compatible(saved_yaml: Path, cfg) -> None:
    """A resumed run must be the same experiment: only length/logging fields may differ."""
    import yaml

    if not saved_yaml.exists():
        return
    saved = yaml.safe_load(saved_yaml.read_text()) or {}
    changed = [k for k in _diff(saved, cfg.model_dump(mode="json")) if not k.startswith(RESUMABLE_CHANGES)]
    if changed:
        raise UsageError(
            f"--resume: the config differs from the run's {saved_yaml} in {', '.join(changed)}; "
            f"a resumed run must be the same experiment (only {', '.join(RESUMABLE_CHANGES)} may change). "
            f"Start a new run (another run.name) to change these."
        )


def apply_threads(threads: int) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


@contextmanager
def discard_on_failed_start(run_dir, *, fresh: bool):
    """A fresh run whose start fails (before anything is logged or saved) leaves no directory
    behind, so the corrected command is not refused with "already exists"."""
    try:
        yield
    except BaseException:
        if fresh and run_dir.discard_if_unused():
            logging.getLogger("rlxf").info("the run failed before its first step; removed %s", run_dir.path)
        raise


def run(config: Path, overrides: list[str], *, resume: bool, overwrite: bool) -> None:
    from rlxf.config import load_config
    from rlxf.run_dir import RunDir, RunDirError, setup_logging

    from rlxf.cli.preflight import check_inputs

    cfg = load_config(config, overrides)
    try:
        RunDir.check(cfg.run.output_dir, cfg.run.name, resume=resume, overwrite=overwrite)
    except RunDirError as e:
        raise UsageError(str(e)) from None
    check_inputs(cfg)
    run_dir = RunDir.open(cfg.run.output_dir, cfg.run.name, resume=resume, overwrite=overwrite)
    if resume:
        check_resume_compatible(run_dir.config, cfg)
    log = setup_logging(run_dir.log)
    apply_threads(cfg.run.threads)
    log.info("run directory %s", run_dir.path)

    from rlxf.metrics.report import write_report
    from rlxf.placement import run_training

    with discard_on_failed_start(run_dir, fresh=not resume):
        last = run_training(cfg, run_dir, resume=resume)
    report = write_report([run_dir.path])
    summary = ", ".join(f"{k} {last[k]:.4g}" for k in ("reward/mean", "accuracy", "eval/accuracy") if k in last)
    log.info("done: %s; report %s", summary or "no metrics", report)
    logging.shutdown()

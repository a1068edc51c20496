"""`rlxf sft CONFIG [OVERRIDES] [--resume | --overwrite]`"""

from __future__ import annotations

from pathlib import Path

from rlxf.cli.errors import UsageError

# A resumed run may run longer or log differently, never learn something else.
RUN_RESUMABLE = ("logging.", "eval.", "checkpoint.", "run.threads")
RESUMABLE = (*RUN_RESUMABLE, "sft.steps", "sft.max_seconds", "sft.eval_every")


def run(config: Path, overrides: list[str], *, overwrite: bool, resume: bool = False) -> None:
    from rlxf.cli.train import apply_threads, check_resume_compatible
    from rlxf.config import load_config
    from rlxf.run_dir import RunDir, RunDirError, setup_logging

    cfg = load_config(config, overrides)
    try:
        run_dir = RunDir.open(cfg.run.output_dir, cfg.run.name, resume=resume, overwrite=overwrite)
    except RunDirError as e:
        raise UsageError(str(e)) from None
    if resume:
        check_resume_compatible(run_dir.config, cfg, RESUMABLE)
    setup_logging(run_dir.log)
    apply_threads(cfg.run.threads)

    from rlxf.trainer.sft import run_sft

    run_sft(cfg, run_dir, resume=resume)

"""`rlxf sft CONFIG [OVERRIDES] [--resume | --overwrite]`"""

from __future__ import annotations

from pathlib import Path

# A resumed run may run longer or log differently, never learn something else.
RUN_RESUMABLE = ("logging.", "eval.", "checkpoint.", "run.threads")
RESUMABLE = (*RUN_RESUMABLE, "sft.steps", "sft.max_seconds", "sft.eval_every")


def run(config: Path, overrides: list[str], *, overwrite: bool, resume: bool = False) -> None:
    from rlxf.cli.preflight import check_inputs
    from rlxf.cli.train import (
        apply_threads,
        check_resume_compatible,
        discard_on_failed_start,
        open_run_dir,
        stop_with_resume_hint,
    )
    from rlxf.config.load import load_config_located
    from rlxf.run_dir import setup_logging

    cfg, origins = load_config_located(config, overrides)
    run_dir = open_run_dir(cfg, "sft", lambda: check_inputs(cfg, prompts=False, origins=origins), resume=resume,
                           overwrite=overwrite)
    with stop_with_resume_hint("sft", config, overrides, run_dir.checkpoints), \
            discard_on_failed_start(run_dir, fresh=not resume):  # all of the start: see `rlxf train`
        if resume:
            check_resume_compatible(run_dir.config, cfg, RESUMABLE)
        setup_logging(run_dir.log)
        apply_threads(cfg.run.threads)

        from rlxf.trainer.sft import run_sft

        run_sft(cfg, run_dir, resume=resume)

    from rlxf.metrics.report import write_report

    report = write_report([run_dir.path])  # the loss curve, eval points, samples: as for RL
    print(f"report {report}")

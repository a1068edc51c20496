"""`rlxf rm CONFIG` and `rlxf dpo CONFIG` [OVERRIDES] [--resume | --overwrite]"""

from __future__ import annotations

from pathlib import Path


def run(kind: str, config: Path, overrides: list[str], *, resume: bool, overwrite: bool) -> None:
    """``kind``: "rm" (reward model) or "dpo" (the DPO family)."""
    from rlxf.cli.preflight import check_pair_inputs
    from rlxf.cli.sft import RUN_RESUMABLE
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
    run_dir = open_run_dir(cfg, kind, lambda: check_pair_inputs(cfg, origins), resume=resume, overwrite=overwrite)
    # everything from here on under the guard, as in `rlxf train`: a Ctrl-C or failure before the
    # first step leaves no directory behind to refuse the next start
    with stop_with_resume_hint(kind, config, overrides, run_dir.checkpoints), \
            discard_on_failed_start(run_dir, fresh=not resume):
        if resume:
            check_resume_compatible(run_dir.config, cfg, (*RUN_RESUMABLE, f"{kind}.steps", f"{kind}.eval_every"))
        setup_logging(run_dir.log)
        apply_threads(cfg.run.threads)
        if kind == "rm":
            from rlxf.trainer.reward_model import run_reward_model as train
        else:
            from rlxf.trainer.dpo import run_dpo as train
        train(cfg, run_dir, resume=resume)

    from rlxf.metrics.report import write_report

    write_report([run_dir.path])

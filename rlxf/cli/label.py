"""`rlxf label CONFIG [OVERRIDES] [--overwrite]`"""

from __future__ import annotations

from pathlib import Path

from rlxf.cli.errors import UsageError


def run(config: Path, overrides: list[str], *, overwrite: bool) -> None:
    from rlxf.cli.preflight import check_inputs
    from rlxf.cli.train import apply_threads, discard_on_failed_start
    from rlxf.config import load_config
    from rlxf.run_dir import RunDir, RunDirError, setup_logging

    cfg = load_config(config, overrides)
    try:
        RunDir.check(cfg.run.output_dir, cfg.run.name, overwrite=overwrite, command="label")
    except RunDirError as e:
        raise UsageError(str(e).replace("Pass --resume to continue that run, ", "Pass ")) from None
    check_inputs(cfg)
    run_dir = RunDir.open(cfg.run.output_dir, cfg.run.name, overwrite=overwrite, command="label")
    setup_logging(run_dir.log)
    apply_threads(cfg.run.threads)

    from rlxf.trainer.label import run_label

    with discard_on_failed_start(run_dir, fresh=True):
        run_label(cfg, run_dir)

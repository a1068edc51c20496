"""`rlxf label CONFIG [OVERRIDES] [--resume | --overwrite]`"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

# Fields a resumed labelling may change: what it logs, and the failure limits that stopped it
# (raising one is how a run stopped by failed rewards goes on); never what is sampled or scored.
RESUMABLE = ("logging.", "run.threads", "reward.max_error_frac")


def run(config: Path, overrides: list[str], *, overwrite: bool, resume: bool = False) -> None:
    from rlxf.cli.preflight import check_inputs
    from rlxf.cli.train import apply_threads, check_resume_compatible, discard_on_failed_start, open_run_dir
    from rlxf.config.load import load_config_located
    from rlxf.errors import UserInputError
    from rlxf.run_dir import setup_logging

    cfg, origins = load_config_located(config, overrides)
    run_dir = open_run_dir(cfg, "label", lambda: check_inputs(cfg, origins=origins), resume=resume,
                           overwrite=overwrite)
    again = shlex.join(["rlxf", "label", str(config), *overrides, "--resume"])
    # everything from here on under the guard, as in `rlxf train`: a Ctrl-C or failure before the
    # first batch leaves no directory behind to refuse the next start
    with discard_on_failed_start(run_dir, fresh=not resume):
        if resume:
            check_resume_compatible(run_dir.config, cfg, RESUMABLE)
        setup_logging(run_dir.log)
        apply_threads(cfg.run.threads)

        from rlxf.trainer.label import run_label

        try:
            run_label(cfg, run_dir, resume=resume)
        except UserInputError:   # bad config or data: resuming would fail the same way
            raise
        except BaseException:
            # a run that finished no batch is removed (discard_on_failed_start): nothing to resume
            if any(p.stat().st_size for p in run_dir.path.glob("label_progress_*.jsonl")):
                logging.getLogger("rlxf").error("labelling stopped; `%s` goes on from its last finished batch", again)
            raise

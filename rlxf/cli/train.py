"""`rlxf train CONFIG [OVERRIDES] [--resume | --overwrite]`"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import typer

from rlxf.cli.errors import UsageError
from rlxf.errors import UserInputError

# Fields a resumed run may change: how long it runs, what it logs and where its roles run, never
# what it learns.
RESUMABLE_CHANGES = ("train.steps", "train.max_seconds", "logging.", "eval.", "checkpoint.", "run.threads", "run.placement", "ray.")


def _diff(a, b, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def check_resume_compatible(saved_yaml: Path, cfg, resumable: tuple[str, ...] = RESUMABLE_CHANGES) -> None:
    """A resumed run must be the same experiment: only length/logging fields (``resumable``
    prefixes) may differ."""
    import yaml

    if not saved_yaml.exists():  # removed by hand: the data fingerprint and the checkpoint's shapes still are
        logging.getLogger("rlxf").warning(
            "--resume: %s is missing, so this config cannot be compared with the run's; a changed setting "
            "(rollout.n, the algorithm, the lr...) would go unnoticed. Put it back to have it checked", saved_yaml)
        return
    saved = yaml.safe_load(saved_yaml.read_text()) or {}
    try:  # through the model: a field added since that run compares as its default, not as "changed"
        saved = type(cfg).model_validate(saved).model_dump(mode="json")
    except ValueError:
        pass  # written by an older rlxf whose fields no longer validate: compare the raw YAML
    now = cfg.model_dump(mode="json")
    diff = _diff(saved, now)
    changed = [k for k in diff if not k.startswith(resumable)]
    # a run's length may change, but a cosine schedule is laid over it (its steps, and its time
    # budget where that ends the run first): the lr would jump
    lengths = [k for k in diff if k.endswith((".steps", ".max_seconds"))]
    cosine = [f"{section}.optim.schedule" for k in lengths
              for section in (("train", "critic") if k.startswith("train.") else (k.rpartition(".")[0],))
              if now.get(section, {}).get("optim", {}).get("schedule") == "cosine"]
    if cosine and not changed:
        raise UsageError(
            f"--resume: {', '.join(lengths)} changed, and {', '.join(cosine)} is cosine: its decay is laid over the "
            f"run's length, so the learning rate would jump. Resume with the length the run started with, or start "
            f"a new run from the checkpoint's model (model.path) to train longer.")
    if changed:
        raise UsageError(
            f"--resume: the config differs from the run's {saved_yaml} in {', '.join(changed)}; "
            f"a resumed run must be the same experiment (only {', '.join(resumable)} may change). "
            f"Start a new run (another run.name) to change these."
        )


def apply_threads(threads: int) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def resume_hint(checkpoints: Path, command: str) -> str:
    """What to run to continue, and from which checkpoint (or that there is none yet). A fresh
    run that stopped before logging anything was removed (``discard_on_failed_start``; this
    process no longer holds its lock), and an --overwrite's old run put back there: nothing of
    it to resume, so it is run again as it was (``command`` without its ``--resume``)."""
    from rlxf.run_dir import holds_lock
    from rlxf.trainer.checkpoint import CheckpointUnreadable, latest_checkpoint

    run = checkpoints.parent
    if not holds_lock(run):
        back = run.exists()
        again = command.removesuffix(" --resume") + (" --overwrite" if back else "")
        return (f"it stopped before its first step, so its run directory was removed"
                f"{' and the run it was to replace put back' if back else ''}; run it again with: {again}")
    try:
        ckpt = latest_checkpoint(checkpoints)
    except (OSError, CheckpointUnreadable):   # the error being reported may be this one: say it once
        return f"once the checkpoints can be read, continue with: {command}"
    if ckpt is None:
        return f"no checkpoint was written yet; `{command}` starts the run over"
    return f"continue from {ckpt} with: {command}"


def open_run_dir(cfg, command: str, check_inputs: Callable[[], None], *, resume: bool = False,
                 overwrite: bool = False, resumable: bool = True):
    """The run directory of ``rlxf COMMAND``, opened only once it and the inputs are known to be
    usable (``check_inputs``), so a bad model path or data field creates nothing. A command that
    cannot resume (``resumable=False``) does not suggest --resume."""
    from rlxf.run_dir import RunDir, RunDirError

    try:
        RunDir.check(cfg.run.output_dir, cfg.run.name, resume=resume, overwrite=overwrite, command=command)
    except RunDirError as e:
        message = str(e) if resumable else str(e).replace("Pass --resume to continue that run, ", "Pass ")
        raise UsageError(message) from None
    check_inputs()
    return RunDir.open(cfg.run.output_dir, cfg.run.name, resume=resume, overwrite=overwrite, command=command)


@contextmanager
def discard_on_failed_start(run_dir, *, fresh: bool):
    """A fresh run whose start fails (before anything is logged or saved) leaves no directory
    behind, so the corrected command is not refused with "already exists", and the run an
    --overwrite set aside comes back; otherwise that old run is deleted when this ends."""
    try:
        yield
    except BaseException:
        if not fresh:
            run_dir.drop_replaced()
        elif run_dir.discard_if_unused():
            log = logging.getLogger("rlxf")
            for handler in [h for h in log.handlers if isinstance(h, logging.FileHandler)]:
                if Path(handler.baseFilename).is_relative_to(os.path.abspath(run_dir.path)):  # as FileHandler's
                    log.removeHandler(handler)  # its file is gone: a later run in this process logs elsewhere
                    handler.close()
            if run_dir.path.exists():   # --overwrite: the run it was to replace is back there
                log.info("the run failed before its first step; its directory was removed and the run it "
                         "was to replace put back at %s", run_dir.path)
            else:
                log.info("the run failed before its first step; removed %s", run_dir.path)
        raise
    run_dir.drop_replaced()


@contextmanager
def stop_with_resume_hint(command: str, config: Path, overrides: list[str], checkpoints: Path):
    """Turn a run's stop on a signal into the shell's answer: ``TrainingInterrupted`` (SIGTERM or
    a first Ctrl-C; the finished step was checkpointed) exits 128 + signal, a second Ctrl-C (or
    one before the first step) exits 130, each after printing the ``--resume`` command. Any
    other failure that is not the user's input is logged with the same hint and re-raised."""
    from rlxf.trainer.interrupt import TrainingInterrupted

    log = logging.getLogger("rlxf")
    again = shlex.join(["rlxf", command, str(config), *overrides, "--resume"])
    try:
        yield
    except TrainingInterrupted as e:
        log.warning("%s", e)
        print(f"{e}\n{resume_hint(checkpoints, again)}", file=sys.stderr)
        logging.shutdown()
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:
        print(f"interrupted\n{resume_hint(checkpoints, again)}", file=sys.stderr)
        logging.shutdown()
        raise typer.Exit(130) from None
    except UserInputError:  # bad config or data: resuming would fail the same way
        raise
    except Exception:
        log.error("the run failed; %s", resume_hint(checkpoints, again))
        raise


def run(config: Path, overrides: list[str], *, resume: bool, overwrite: bool) -> None:
    from rlxf.cli.preflight import check_inputs
    from rlxf.config.load import load_config_located
    from rlxf.run_dir import setup_logging

    cfg, origins = load_config_located(config, overrides)
    run_dir = open_run_dir(cfg, "train", lambda: check_inputs(cfg, origins=origins), resume=resume,
                           overwrite=overwrite)
    # everything from here on under the guard: a Ctrl-C or failure before the first step leaves no
    # directory behind to refuse the next start
    with stop_with_resume_hint("train", config, overrides, run_dir.checkpoints), \
            discard_on_failed_start(run_dir, fresh=not resume):
        if resume:
            check_resume_compatible(run_dir.config, cfg)
        log = setup_logging(run_dir.log)
        apply_threads(cfg.run.threads)
        log.info("run directory %s", run_dir.path)

        from rlxf.metrics.report import write_report
        from rlxf.placement import run_training

        last = run_training(cfg, run_dir, resume=resume)
    report = write_report([run_dir.path])
    summary = ", ".join(f"{k} {last[k]:.4g}" for k in ("reward/mean", "accuracy", "eval/accuracy") if k in last)
    log.info("done: %s; report %s", summary or "no metrics", report)
    logging.shutdown()

"""The run directory: everything a run writes, in one place.

    runs/<name>/
      config.yaml        the resolved config (what actually ran)
      metrics.jsonl      one JSON object per step, appended and fsynced
      samples.jsonl      a fraction of each step's rollouts: prompt, response, reward, scores
      train.log          the log
      checkpoints/step_N/  model/ (HF format) + trainer state; SFT and RL alike (rlxf.models.paths)
      eval.jsonl         what `rlxf eval` measured on this run's checkpoints
      report.html        plots (`rlxf report`)
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.logging import RichHandler

from rlxf.errors import UserInputError


class RunDirError(UserInputError):
    """The run directory cannot be used as asked (exists, or is missing on --resume)."""


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def samples(self) -> Path:
        return self.path / "samples.jsonl"

    @property
    def log(self) -> Path:
        return self.path / "train.log"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    @classmethod
    def open(cls, output_dir: str | Path, name: str, *, resume: bool = False,
             overwrite: bool = False) -> RunDir:
        """Create ``output_dir/name`` (or reopen it with ``resume``).

        An existing directory is never reused silently: pass ``resume`` to continue it or
        ``overwrite`` to delete it and start over.
        """
        path = cls.check(output_dir, name, resume=resume, overwrite=overwrite)
        if overwrite and path.exists():
            shutil.rmtree(path)
        run = cls(path)
        run.checkpoints.mkdir(parents=True, exist_ok=True)
        return run

    @staticmethod
    def check(output_dir: str | Path, name: str, *, resume: bool = False, overwrite: bool = False) -> Path:
        """The path ``open`` would use, or the RunDirError it would raise; creates nothing (a
        command checks this before validating its inputs, then opens)."""
        if resume and overwrite:
            raise RunDirError("--resume and --overwrite contradict each other; pass one")
        path = Path(output_dir) / name
        exists = path.exists() and any(path.iterdir())
        if resume and not exists:
            raise RunDirError(f"--resume: {path} does not exist (or is empty); start the run without --resume")
        if exists and not (resume or overwrite):
            raise RunDirError(
                f"{path} already exists. Pass --resume to continue that run, --overwrite to delete it "
                f"and start over, or choose another run.name (e.g. run.name={name}-2)"
            )
        return path

    def discard_if_unused(self) -> bool:
        """Delete this run directory if the run logged nothing and saved no checkpoint or model
        (its start failed), so that the corrected command can use the name again; True if deleted."""
        logged = self.metrics.exists() and self.metrics.stat().st_size > 0
        saved = (self.checkpoints.exists() and any(self.checkpoints.iterdir())) or (self.path / "model").exists()
        if logged or saved:
            return False
        shutil.rmtree(self.path, ignore_errors=True)
        return True


def setup_logging(log_file: Path | None, *, console: bool = True, level: int = logging.INFO) -> logging.Logger:
    """Log to the run's log file (plain) and the terminal (rich); returns the `rlxf` logger.

    transformers' own progress bars and info messages (weight loading, shard writing) are
    silenced: a run's terminal shows rlxf's progress, and warnings still come through.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_warning()
    hf_logging.disable_progress_bar()
    logger = logging.getLogger("rlxf")
    logger.setLevel(level)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    if console:
        # stderr: a command's stdout stays machine-readable (`rlxf eval ... | jq`)
        logger.addHandler(RichHandler(console=Console(stderr=True), show_path=False,
                                      rich_tracebacks=False, markup=False))
    if log_file is not None:
        fh = logging.FileHandler(log_file)
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(fh)
    logger.propagate = False
    return logger

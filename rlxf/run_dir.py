"""The run directory: everything a run writes, in one place.

    runs/<name>/
      config.yaml        the resolved config (what actually ran)
      metrics.jsonl      one JSON object per step, appended and fsynced
      samples.jsonl      a fraction of each step's rollouts: prompt, response, reward, scores
      train.log          the log
      checkpoints/step_N/  model/ (HF format) + trainer state; SFT and RL alike (rlxf.models.paths)
      eval.jsonl         what `rlxf eval` measured on this run's checkpoints
      report.html        plots (`rlxf report`)
      sink_runs.json     the W&B / MLflow run ids (``logging.sinks``) a `--resume` logs to again
      sink_steps.json    the last step each of those runs was sent (a resume does not send its replayed steps again)
      sink_missed.json   the steps a TensorBoard / W&B / MLflow sink could not take (said at the end and on resume)
      run.json           which command made the run (``{"command": "sft"}``): `--resume` with another
                         one is refused, and `--overwrite` deletes only a directory that holds it, or
                         config.yaml with the log, metrics or checkpoints/ of a run from before it
      .lock              held (flock) by the process using the run: a second one is refused

`--overwrite` moves the old run aside (``.<name>.replaced-<pid>`` next to it) and deletes it
when the command ends, or fails after its run logged or saved something; a start that fails
(bad data found after the directory was made) puts it back. A directory left by a start that
died before its first step (nothing logged or saved, its lock free) does not refuse the next run
of that name: that run clears it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.logging import RichHandler

from rlxf.errors import UserInputError


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: written to a temporary file beside it, fsynced, renamed
    over it. A kill or a full disk leaves the old file whole (the temporary one is removed)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class RunDirError(UserInputError):
    """The run directory cannot be used as asked (exists, is missing on --resume, is not a run,
    or cannot be created)."""


RECORD = "run.json"
LOCK = ".lock"
_held: dict[Path, int] = {}   # run directory -> the open file of its lock, held until the process ends


def looks_like_run(path: Path) -> bool:
    """``path`` holds what RunDir.open or a run writes first: the record, or (a run from before
    the record) the resolved config or log beside what a run writes with it. A directory of
    the user's with a config.yaml in it is not a run."""
    if (path / RECORD).is_file():
        return True
    written = [(path / "checkpoints").is_dir(), (path / "train.log").is_file(), (path / "metrics.jsonl").is_file()]
    return ((path / "config.yaml").is_file() and any(written)) or all(written[:2])


def _unused(path: Path) -> bool:
    """Whether the run at ``path`` logged nothing (no records in metrics.jsonl or any other .jsonl,
    such as `rlxf label`'s pairs) and saved no checkpoint or model: its start failed or stopped."""
    logged = any(f.is_file() and f.stat().st_size > 0 for f in path.glob("*.jsonl"))
    checkpoints = path / "checkpoints"
    saved = (checkpoints.exists() and any(checkpoints.iterdir())) or (path / "model").exists()
    return not (logged or saved)


def _abandoned(path: Path) -> bool:
    """``path`` was left by a start that died before its first step (a kill, an out-of-memory
    kill while the model loaded, a Ctrl-C no handler saw): made by ``RunDir.open`` (its record
    and lock), unused, and its lock held by no process. Nothing in it is worth a refusal: the
    next run of that name clears it (``RunDir.open``) instead of "already exists"."""
    return ((path / RECORD).is_file() and (path / LOCK).is_file() and _held_here(path) is None
            and _user(path) is None and _unused(path))


def _held_here(path: Path) -> int | None:
    """The fd of ``path``'s lock if this process holds it (the lock file is still the one locked)."""
    fd = _held.get(path.resolve())
    try:
        if fd is not None and os.fstat(fd).st_ino == os.stat(path / LOCK).st_ino:
            return fd
    except OSError:
        pass
    return None


def holds_lock(path: Path) -> bool:
    """Whether this process holds the lock of the run directory ``path`` (opened it, and has not
    released or discarded it)."""
    return _held_here(path) is not None


def _user(path: Path) -> str | None:
    """Who holds ``path``'s lock ("process 1234"), or None when no other process does."""
    lock = path / LOCK
    if not lock.is_file() or _held_here(path) is not None:
        return None
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return f"process {pid}" if pid.isdigit() else "another process"
    finally:
        os.close(fd)  # releases the lock, if this took it
    return None


def _lock(path: Path) -> None:
    """Hold ``path``'s lock for as long as this process lives (the kernel drops it at exit, kill -9
    included), with our pid in the file for the message another process gets."""
    if _held_here(path) is not None:
        return
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _in_use(path, "another process") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    old = _held.pop(path.resolve(), None)
    if old is not None:
        os.close(old)
    _held[path.resolve()] = fd


def _release(path: Path) -> None:
    fd = _held.pop(path.resolve(), None)
    if fd is not None:
        os.close(fd)


def _in_use(path: Path, user: str) -> RunDirError:
    return RunDirError(f"{path} is in use by {user} (an rlxf run holds its {LOCK}); wait for it to finish or "
                       f"stop it, or choose another run.name: two processes in one run directory would "
                       f"overwrite each other's checkpoints and metrics")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recorded_command(path: Path) -> str | None:
    """The command that made the run at ``path`` (run.json), or None for a run made before
    rlxf recorded it (or an unreadable record)."""
    try:
        return json.loads((path / RECORD).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        return None


def _unusable(path: Path, err: OSError, resume: str | None = None) -> RunDirError:
    """The error for ``err``, met while setting up ``path``; ``resume``: how the caller spells
    --resume, when it resumes (the run is there: another name would start it over)."""
    reason = err.strerror or type(err).__name__
    if err.errno in (errno.ENOSPC, errno.EDQUOT):   # not the directory's fault: another name would fail too
        return RunDirError(f"run.output_dir/run.name: cannot set up the run directory {path} ({reason}); nothing "
                           f"was changed. Free space on {path.parent} and run again")
    if resume is not None:
        return RunDirError(f"{resume}: cannot use the run directory {path} ({reason}); nothing was "
                           f"changed. A resumed run writes its lock, metrics and checkpoints there: make it "
                           f"writable (remount a read-only filesystem read-write, or fix its owner and mode) "
                           f"and resume again")
    return RunDirError(f"run.output_dir/run.name: cannot use {path} as the run directory ({reason}); "
                       f"set run.output_dir to a writable directory and run.name to a new name")


def _check_creatable(path: Path) -> None:
    """Raise the RunDirError ``mkdir -p path`` would hit: a file where a directory must be, or
    a directory that cannot be written."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise RunDirError(f"run.output_dir/run.name: {parent} is a file, not a directory, so {path} cannot be "
                          f"created; set run.output_dir to a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RunDirError(f"run.output_dir/run.name: {parent} is not writable, so {path} cannot be created; "
                          f"set run.output_dir to a writable directory")


@dataclass(frozen=True)
class Options:
    """How the caller spells the resume and overwrite choices, for RunDirError messages (a user of
    ``rlxf.train(...)`` has no --resume to pass)."""

    resume: str
    overwrite: str


CLI_OPTIONS = Options("--resume", "--overwrite")
API_OPTIONS = Options("resume=True", "overwrite=True")


@dataclass(frozen=True)
class RunDir:
    path: Path
    replaced: Path | None = field(default=None, compare=False)  # --overwrite: the old run, set aside

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    def write_config(self, text: str) -> None:
        """Replace config.yaml with ``text`` atomically (temp file, fsync, rename).

        A resume rewrites it; written in place, a full disk or a kill halfway would leave the
        run's only record of what ran empty or cut short, and ``--resume`` reads it back."""
        try:
            write_atomically(self.config, text.encode())
        except OSError as e:
            raise RunDirError(f"cannot write {self.config} ({e.strerror or type(e).__name__}); the previous one is "
                              f"kept. Free space on {self.path.parent} (or fix its permissions) and run again") from None

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

    @property
    def record(self) -> Path:
        return self.path / RECORD

    @classmethod
    def open(cls, output_dir: str | Path, name: str, *, resume: bool = False,
             overwrite: bool = False, command: str | None = None, options: Options = CLI_OPTIONS) -> RunDir:
        """Create ``output_dir/name`` (or reopen it with ``resume``).

        An existing directory is never reused silently: pass ``resume`` to continue it or
        ``overwrite`` to delete it and start over (one a start left unused is cleared, with a
        warning: ``_abandoned``). ``command`` (``train``, ``sft``, ...) is
        recorded in a new run and checked against the record on ``resume``. ``options``: how the
        caller spells ``resume`` and ``overwrite`` in its errors (``API_OPTIONS`` for ``rlxf.train``).
        """
        path = cls.check(output_dir, name, resume=resume, overwrite=overwrite, command=command, options=options)
        replaced = None
        try:
            _sweep_replaced(path)
            if not (resume or overwrite) and path.is_dir() and any(path.iterdir()):  # abandoned, as check found
                _lock(path)  # first, so that two runs starting at once do not both clear it
                log = logging.getLogger("rlxf")
                log.warning("%s was left by a start that stopped before its first step (nothing logged or saved); "
                            "cleared for this run", path)
                for item in path.iterdir():
                    if item.is_dir() and not item.is_symlink():
                        shutil.rmtree(item)
                    elif item.name != LOCK:
                        item.unlink()
            if overwrite and path.exists() and any(path.iterdir()):
                replaced = path.with_name(f".{path.name}.replaced-{os.getpid()}")
                if replaced.exists():
                    shutil.rmtree(replaced)
                path.rename(replaced)
                _release(path)
            run = cls(path, replaced)
            path.mkdir(parents=True, exist_ok=True)
            _lock(path)  # before anything else is made in it: an empty directory is no run to refuse
            run.checkpoints.mkdir(exist_ok=True)
            if command is not None and not resume:
                run.record.write_text(json.dumps({"command": command}) + "\n")
        except BaseException as e:  # a Ctrl-C or a full disk while it was made: no half-made directory, the old run back
            if not resume and (replaced is not None or holds_lock(path)):  # never one another process holds
                cls(path, replaced).discard_if_unused()
            if isinstance(e, OSError):
                raise _unusable(path, e, options.resume if resume else None) from None
            raise
        return run

    @staticmethod
    def check(output_dir: str | Path, name: str, *, resume: bool = False, overwrite: bool = False,
              command: str | None = None, options: Options = CLI_OPTIONS) -> Path:
        """The path ``open`` would use, or the RunDirError it would raise; creates nothing (a
        command checks this before validating its inputs, then opens), but first puts back a run
        that an --overwrite killed before its first step had set aside (``_put_back_replaced``)."""
        if resume and overwrite:
            raise RunDirError(f"{options.resume} and {options.overwrite} contradict each other; pass one")
        path = Path(output_dir) / name
        try:
            _put_back_replaced(path)
            if path.exists() and not path.is_dir():
                raise RunDirError(f"run.output_dir/run.name: {path} is a file, not a run directory; choose "
                                  f"another run.name (or run.output_dir)")
            exists = path.exists() and any(path.iterdir())
            if not exists:
                _check_creatable(path)
        except OSError as e:
            raise _unusable(path, e, options.resume if resume else None) from None
        if resume and not exists:
            raise RunDirError(f"{options.resume}: {path} does not exist (or is empty); start the run without "
                              f"{options.resume}")
        if exists and not (resume or overwrite) and not _abandoned(path):
            raise RunDirError(
                f"{path} already exists. Pass {options.resume} to continue that run, {options.overwrite} to delete it "
                f"and start over, or choose another run.name (e.g. run.name={name}-2)"
            )
        if exists and not looks_like_run(path):
            flag, action = (options.resume, "continued") if resume else (options.overwrite, "deleted")
            raise RunDirError(
                f"{flag}: {path} is not an rlxf run directory (it holds no {RECORD}, nor a config.yaml with "
                f"a run's log, metrics or checkpoints/), so it is not {action}; check run.output_dir and "
                f"run.name, or choose another run.name"
                + ("" if resume else " (or delete the directory yourself to use this one)")
            )
        user = _user(path) if exists else None
        if user is not None:
            raise _in_use(path, user)
        made_by = recorded_command(path) if resume else None
        if command is not None and made_by is not None and made_by != command:
            raise RunDirError(
                f"{options.resume}: {path} is a run of `rlxf {made_by}`, not `rlxf {command}`; continue it with "
                f"`rlxf {made_by} CONFIG --resume`, or choose another run.name for a new {command} run"
            )
        return path

    def discard_if_unused(self) -> bool:
        """Delete this run directory if the run logged nothing (no records in metrics.jsonl or any
        other .jsonl, such as `rlxf label`'s pairs) and saved no checkpoint or model (its start
        failed), so that the corrected command can use the name again; True if deleted."""
        if not _unused(self.path):
            self.drop_replaced()
            return False
        _release(self.path)
        shutil.rmtree(self.path, ignore_errors=True)
        if self.replaced is not None and self.replaced.exists():  # --overwrite: the old run comes back
            self.replaced.rename(self.path)
            logging.getLogger("rlxf").info("put back the run %s was to replace", self.path)
        return True

    def release(self) -> None:
        """Let another process use this run directory now (a library call that ran a run in a
        process that lives on, such as a notebook's); the end of the process releases it anyway."""
        _release(self.path)

    def drop_replaced(self) -> None:
        """--overwrite: delete the old run set aside, now that the new one has started."""
        if self.replaced is not None:
            shutil.rmtree(self.replaced, ignore_errors=True)


def _orphans(path: Path) -> list[Path]:
    """Old runs set aside for ``path`` by an --overwrite whose process is gone, newest first."""
    found = []
    for aside in path.parent.glob(f".{path.name}.replaced-*") if path.parent.is_dir() else ():
        pid = aside.name.rpartition("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            found.append(aside)
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def _put_back_replaced(path: Path) -> None:
    """An --overwrite killed before its new run logged or saved anything (kill -9, out of memory
    while the model loaded, a Ctrl-C before its guard) left the old run set aside: put it back,
    as a start that fails does, instead of deleting it with the next start's sweep."""
    orphans = _orphans(path)
    if not orphans:
        return
    if path.exists() and not (_held_here(path) is None and _user(path) is None and _unused(path)):
        return  # the new run got going (or is starting now): the old one is deleted by the sweep
    if path.exists():
        shutil.rmtree(path)
    orphans[0].rename(path)
    logging.getLogger("rlxf").warning("put back the run at %s: the --overwrite that set it aside stopped before its "
                                      "first step", path)


def _sweep_replaced(path: Path) -> None:
    """Delete old runs set aside for ``path`` by an --overwrite whose process is gone (killed
    after the new run started; one killed before is put back by ``_put_back_replaced``)."""
    for aside in _orphans(path):
        shutil.rmtree(aside, ignore_errors=True)


class QuietConsole(Console):
    """A console that falls silent when its reader goes away (``rlxf train ... 2>&1 | head``, a
    ``tee`` that was killed): rich's own ends the process with exit status 1 and no word said,
    and a log or progress line must never be what stops a run."""

    def on_broken_pipe(self) -> None:
        self.quiet = True


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
        terminal = QuietConsole(stderr=True)
        if terminal.is_terminal or terminal.is_jupyter:
            logger.addHandler(RichHandler(console=terminal, show_path=False, rich_tracebacks=False, markup=False))
        else:  # piped to a file or a CI log: one line per record, not wrapped at 80 columns mid-path
            plain = logging.StreamHandler()
            plain.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
            logger.addHandler(plain)
    if log_file is not None:
        fh = logging.FileHandler(log_file)
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(fh)
    logger.propagate = False
    return logger

"""Checkpoints that survive a kill at any moment, and resume bit-for-bit.

    checkpoints/step_N/
      model/              HF format (safetensors + config + tokenizer): from_pretrained-loadable
      critic/             PPO only
      learner_state.pt    optimizers, schedules, KL controller, ... (the placement's, see trainer.learner)
      trainer_state.pt    the loop's: step, data-sampler position, RNG states, training time so far
                          (what train.max_seconds / sft.max_seconds budget across resumes); written last

A checkpoint is written to a hidden temporary directory, fsynced, then renamed into place in
one ``rename(2)``: a reader sees either the whole checkpoint or none. Deleting one (``keep_last``)
is the same in reverse: it is renamed to a hidden name first, then removed, so a kill halfway
through never leaves a ``step_N`` that is neither whole nor gone. Each save sweeps what a killed
writer left behind: hidden ``.tmp-``/``.old-``/``.del-`` directories, and ``step_N`` directories
without ``trainer_state.pt`` older than the newest complete checkpoint (an older rlxf's half-done
deletions; they are never resumed from). Re-saving a step swaps two renames (``step_N`` aside as
``.old-``, the new one in); a kill between them leaves no ``step_N``, so the set-aside one is
renamed back before anything is swept or resumed. A save that fails (a full disk, a second
Ctrl-C) removes what it had written, and puts a set-aside ``step_N`` back, before it raises.

``trainer_state.pt`` lists every other file of the checkpoint with its length (``files``): a file
gone or cut short later is damage even where its format has no check of its own (a missing
``learner_state.pt``, a truncated chat template), so a resume takes the checkpoint before it;
``keep_last`` does not delete the newest checkpoint with all its files at their saved lengths
while every newer one it keeps lacks one (a stat per file at each save, a few ms).
A file the system will not let the process read (its permissions, an I/O error) is not damage:
the resume stops and says so (``CheckpointUnreadable``), as taking the checkpoint before it would
have the next save delete the newer one.
"""

from __future__ import annotations

import errno
import logging
import os
import pickle
import random
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger("rlxf")

STEP_DIR = re.compile(r"^step_(\d+)$")
STATE_FILE = "trainer_state.pt"
# hidden directories of a save in progress: written (.tmp), replaced (.old), being deleted (.del)
LEFTOVERS = (".tmp-step_*", ".old-step_*", ".del-step_*")


def rng_state() -> dict[str, Any]:
    """Every RNG's state in types ``torch.load(weights_only=True)`` accepts: tensors, ints,
    floats, strings, tuples, lists and dicts (numpy's key array becomes a uint32 tensor)."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": {"kind": str(kind), "key": torch.from_numpy(np.array(key, dtype=np.uint32)),
                       "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    numpy = state["numpy"]
    np.random.set_state((numpy["kind"], numpy["key"].numpy().astype(np.uint32), numpy["pos"],
                         numpy["has_gauss"], numpy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(path: Path) -> None:
    """Every file under ``path`` and every directory's entries (``model/``'s too, not only the top's)."""
    for root, _, files in os.walk(path):
        for name in files:
            _fsync(os.path.join(root, name))
        _fsync(Path(root))


def _fsync(path: str | Path) -> None:
    """A file's data, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """Every ``step_N`` directory under ``root``, complete or not, as (step, path), oldest first."""
    if not root.exists():
        return []
    found = ((STEP_DIR.match(p.name), p) for p in root.iterdir())
    return sorted((int(m.group(1)), p) for m, p in found if m and p.is_dir())


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``root`` as (step, path), oldest first. A ``step_N`` this
    process may not look into raises ``CheckpointUnreadable`` (not Python's bare PermissionError)."""
    return [(n, p) for n, p in _step_dirs(root) if _has_state(p)]


def _has_state(path: Path) -> bool:
    try:
        return _stat(path / STATE_FILE) is not None
    except OSError as e:   # EACCES on a directory without search permission, EIO
        raise _unreadable(path, e) from None


def _stat(path: Path) -> os.stat_result | None:
    """``path``'s stat, None where there is nothing (or a file stands where a directory should);
    any other error raised. Not ``Path.exists``/``is_file``: from Python 3.13 they answer False
    to EACCES and EIO too, and an unreadable checkpoint would read as a missing one."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def latest_checkpoint(root: Path) -> Path | None:
    ckpts = list_checkpoints(root)
    return ckpts[-1][1] if ckpts else None


class CheckpointDamaged(RuntimeError):
    """No checkpoint of a run can be read back; the message names each damaged file."""


class CheckpointUnreadable(RuntimeError):
    """A checkpoint's file cannot be read by this process (permissions, an I/O error): not damage,
    so nothing falls back to an older checkpoint, whose next save would delete this one."""


def _refused(e: BaseException) -> bool:
    """Whether ``e`` is the system refusing a read (permissions, the disk, ...), which says nothing
    of the bytes: those of a garbled file fail otherwise, or as a seek to a garbled offset (EINVAL)."""
    return isinstance(e, OSError) and e.errno not in (None, errno.EINVAL, errno.ENOENT)


def _unreadable(path: Path, e: OSError) -> CheckpointUnreadable:
    """The error for ``e``, met while reading checkpoint ``path``: the file, the errno, what to do."""
    code = errno.errorcode.get(e.errno, type(e).__name__)
    return CheckpointUnreadable(
        f"cannot read {e.filename or path} ({code}: {e.strerror or e}). That is no damage of the checkpoint "
        f"{path.name}, so the resume stops here instead of taking an older one (whose next save would delete "
        f"{path.name}); nothing was changed. Make it readable by this user (its owner and mode: `ls -l`), "
        f"or for EIO check the disk, then resume again")


def find_damage(path: Path) -> str | None:
    """The first file of checkpoint ``path`` that cannot be read back, and why; None if intact.

    A checkpoint is renamed into place only once complete, so damage comes later (a copy cut
    short, a hand edit, a disk that lost bytes). Each file is checked by its format without building
    a model: safetensors' header must match the file's length, a ``.pt`` archive's entries
    their CRC-32, JSON must parse; then each file the checkpoint was saved with must be there
    with its saved length (``_saved_files``), which finds what no format check can.

    A file or directory the system does not let this process read raises ``CheckpointUnreadable``:
    its permissions (or the disk) are at fault, not the checkpoint.
    """
    try:
        return _first_damage(path)
    except OSError as e:
        if _refused(e):
            raise _unreadable(path, e) from None
        return f"{e.filename or path}: {type(e).__name__}: {e}"  # gone while it was checked


def _first_damage(path: Path) -> str | None:
    import json
    import zipfile

    from safetensors import safe_open

    for file in (path / name for name in _files(path)):
        try:
            open(file, "rb").close()  # the system's own error first: safetensors says "not found" for any
            if file.suffix == ".safetensors":
                with safe_open(file, "pt") as f:
                    f.keys()
            elif file.suffix == ".pt":
                with zipfile.ZipFile(file) as z:
                    bad = z.testzip()
                if bad is not None:
                    raise ValueError(f"entry {bad} fails its CRC check")
            elif file.suffix == ".json":
                json.loads(file.read_text())
        except Exception as e:  # noqa: BLE001 - any failure to read it back is damage, unless the system's
            if _refused(e):
                e.filename = e.filename or str(file)  # a read's error has none
                raise
            return f"{file}: {type(e).__name__}: {e}"
    return _size_damage(path, _saved_files(path) or {})


def _size_damage(path: Path, saved: dict[str, int]) -> str | None:
    """The first of the ``saved`` files (``_saved_files``) gone from checkpoint ``path`` or of
    another length, and how; None if none is."""
    for name, size in sorted(saved.items()):
        file = path / name
        found = _stat(file)
        if found is None or not stat.S_ISREG(found.st_mode):
            return f"{file}: missing (the checkpoint was saved with it, {size} bytes)"
        if found.st_size != size:
            return f"{file}: {found.st_size} bytes, saved with {size} (cut short or changed since)"
    return None


def _stat_damage(path: Path) -> str | None:
    """``find_damage`` without reading the files: a stat of each file checkpoint ``path`` was saved
    with (and a read of its small trainer state), a few ms for every save where reading them all
    takes seconds. None when all are there with their saved lengths (or it predates the list)."""
    saved = _saved_files(path)
    if saved is None:
        return f"{path / STATE_FILE}: does not read back"
    try:
        return _size_damage(path, saved)
    except OSError as e:  # a file that cannot even be looked at is nothing to count on
        return f"{e.filename or path}: {type(e).__name__}: {e}"


def _saved_files(path: Path) -> dict[str, int] | None:
    """The files checkpoint ``path`` was saved with (relative path -> bytes), from its trainer
    state; empty for one saved before the list was kept, None when its trainer state does not
    read back (``find_damage`` reports that file itself)."""
    try:
        files = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True).get("files")
    except Exception:  # noqa: BLE001 - damage of the state file is found by its own check
        return None
    if not isinstance(files, dict):
        return {}
    # relative names only: a crafted list must not send the check outside the checkpoint
    return {str(k): int(v) for k, v in files.items()
            if isinstance(v, int) and not Path(str(k)).is_absolute() and ".." not in Path(str(k)).parts}


def _files(path: Path) -> list[str]:
    """The files under directory ``path``, relative to it, sorted. A directory that cannot be listed
    raises (``Path.rglob`` leaves it out without a word, and its files with it)."""

    def fail(e: OSError) -> None:
        raise e

    found = (os.path.join(root, name) for root, _, names in os.walk(path, onerror=fail) for name in names)
    return sorted(os.path.relpath(file, path) for file in found if os.path.isfile(file))


def _file_sizes(path: Path) -> dict[str, int]:
    return {name: (path / name).stat().st_size for name in _files(path)}


def intact_checkpoint(root: Path) -> Path | None:
    """The newest checkpoint under ``root`` whose files all read back; a damaged newer one is
    skipped with a warning naming its file. Raises ``CheckpointDamaged`` if all are damaged, and
    ``CheckpointUnreadable`` at a file this process may not read (``find_damage``).

    What every ``--resume`` loads (RL, SFT, RM, DPO alike): ``latest_checkpoint`` does not read
    the files, so a checkpoint damaged after it was written would stop the resume."""
    if root.is_dir():
        _restore_swapped(root)
    complete = list_checkpoints(root)
    newest = complete[-1][0] if complete else -1
    damaged = []
    for n, ckpt in reversed(_step_dirs(root)):
        if _has_state(ckpt):
            problem = find_damage(ckpt)
        elif n > newest:  # rlxf leaves none: a copy cut short (taken for none, the run would start over)
            problem = f"{ckpt / STATE_FILE}: missing (its checkpoint directory was copied or moved in part?)"
        else:
            continue  # an older rlxf's half-done deletion, swept by the next save
        if problem is None:
            if damaged:
                log.warning("resuming from the previous intact checkpoint %s instead", ckpt)
            return ckpt
        log.warning("checkpoint %s is damaged: %s", ckpt, problem)
        damaged.append(problem)
    if damaged:
        raise CheckpointDamaged(
            "no intact checkpoint to resume from; damaged: " + "; ".join(damaged) +
            ". Restore those files from a copy, or delete the damaged checkpoint directories to "
            "resume from step 0 (or start over with --overwrite)."
        )
    return None


def save_checkpoint(root: Path, step: int, *, write: Callable[[Path], None],
                    state: dict[str, Any] | Callable[[], dict[str, Any]], keep_last: int) -> Path:
    """Write ``step_<step>`` atomically; keep it and the ``keep_last - 1`` newest before it
    (checkpoints of later steps, left by the run before a resume from an older one, are deleted),
    and, when every one kept has lost a file or part of one since it was written, the newest
    older one that has not (``_stat_damage``: a stat per file, not ``find_damage``'s full read).

    ``write(directory)`` saves the models and the roles' state into the checkpoint directory
    (the placement's ``save``); ``state`` is the loop's own, saved as ``trainer_state.pt``. Given
    as a function, it is read once the models are written and on disk: the training clock in it
    then counts the write, which a clock read before it left out of the time budget after a resume.
    """
    root.mkdir(parents=True, exist_ok=True)
    _sweep(root)
    final = root / f"step_{step}"
    tmp = root / f".tmp-step_{step}-{os.getpid()}"
    tmp.mkdir()
    try:
        write(tmp)
        _fsync_tree(tmp)
        loop_state = state() if callable(state) else state
        torch.save({**loop_state, "step": step, "rng": rng_state(), "files": _file_sizes(tmp)}, tmp / STATE_FILE)
        _fsync(tmp / STATE_FILE)
        _fsync(tmp)
        if final.exists():  # re-saving a step (e.g. after a resume): swap, never a half state
            old = root / f".old-step_{step}-{os.getpid()}"
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
    except BaseException:
        # a full disk or a second Ctrl-C: the half-written copy would hold the space until the next
        # save, and a step_N set aside for the swap would be missing until the next resume
        shutil.rmtree(tmp, ignore_errors=True)
        _restore_swapped(root)
        raise
    _fsync(root)
    # newer checkpoints are of the run before a resume from an older one (resume takes the newest
    # intact one, so they are damaged): that history was cut back (metrics.jsonl too), and counted
    # in keep_last they would push out the checkpoint just written
    older = []
    for n, path in list_checkpoints(root):
        if n > step:
            log.warning("deleting checkpoint %s: it is of the run before the resume from an older one", path)
            _delete(path)
        elif n < step:
            older.append(path)
    doomed = older[:max(0, len(older) - (keep_last - 1))]
    if doomed and all(_stat_damage(p) for p in [final, *older[len(doomed):]]):
        # every kept one lost a file since it was written: deleting the newest that did not would
        # leave a resume nothing to resume from
        spared = next((p for p in reversed(doomed) if _stat_damage(p) is None), None)
        if spared is not None:
            log.warning("keeping checkpoint %s beyond checkpoint.keep_last = %d: the newer ones are "
                        "damaged (%s)", spared, keep_last, _stat_damage(final))
            doomed.remove(spared)
    for path in doomed:
        _delete(path)
    return final


def _delete(path: Path) -> None:
    """Remove checkpoint ``path``: hidden first in one rename, so a kill while its files go
    leaves a ``.del-`` directory for the next save to sweep, not a broken ``step_N``."""
    hidden = path.with_name(f".del-{path.name}-{os.getpid()}")
    if hidden.exists():
        shutil.rmtree(hidden, ignore_errors=True)
    path.rename(hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def _restore_swapped(root: Path) -> None:
    """Rename back a complete ``step_N`` that a re-save had set aside when it was killed before
    renaming the new one in (see ``save_checkpoint``); otherwise the sweep would delete it."""
    for old in root.glob(".old-step_*"):
        m = re.match(r"^\.old-(step_\d+)-\d+$", old.name)
        if m and not (root / m.group(1)).exists() and (old / STATE_FILE).exists():
            old.rename(root / m.group(1))
            log.warning("checkpoint %s: restored from %s (a re-save of it was killed halfway)", m.group(1), old.name)


def _sweep(root: Path) -> None:
    """Remove what killed writers left under ``root`` (see the module docstring)."""
    _restore_swapped(root)
    for pattern in LEFTOVERS:
        for leftover in root.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)
    complete = list_checkpoints(root)
    if not complete:
        return
    newest = complete[-1][0]
    for n, p in _step_dirs(root):
        if n < newest and not _has_state(p):
            _delete(p)


def load_trainer_state(path: Path) -> dict[str, Any]:
    """The trainer state saved with a checkpoint (RNG states are restored by the caller).

    Loaded with ``weights_only=True``: a checkpoint is data, and unpickling arbitrary objects
    would run whatever code a crafted ``trainer_state.pt`` names on ``--resume``.
    """
    file = path / STATE_FILE
    try:
        missing = _stat(file) is None
    except OSError as e:
        raise _unreadable(path, e) from None
    if missing:
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {STATE_FILE})")
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError) as e:  # torch's reader on a truncated or garbled archive
        if _refused(e):  # permissions or the disk: not damage, and not to delete
            raise _unreadable(path, e) from None
        # damage, not a format question: say which file, and how to get past it
        raise CheckpointDamaged(
            f"{file} cannot be read back ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'damaged'}); "
            f"the checkpoint {path.name} is damaged. Delete {path} to resume from the checkpoint before it, "
            f"or restore the file from a copy") from None
    except pickle.UnpicklingError as e:
        raise ValueError(
            f"{file} holds objects other than tensors and plain values, so it is not loaded (loading "
            f"it could run code it names). A checkpoint written by an rlxf older than this check stores "
            f"numpy RNG state as an array: re-save it from a trusted run, or start without --resume. "
            f"Detail: {str(e).splitlines()[0]}") from None

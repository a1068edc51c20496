"""Metrics sinks behind one small interface.

``metrics.jsonl`` is always written; TensorBoard, W&B and MLflow are added when enabled in
``logging.sinks`` (each imported only then). The loop calls one sink and never asks which
ones are on: ``sink.log(step, metrics)``. Only metrics.jsonl's failures stop a run: the others
are conveniences (:class:`OutsideSink`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from rlxf.errors import MissingExtraError, UserInputError, close_all, close_during
from rlxf.run_dir import write_atomically

log = logging.getLogger("rlxf")


class MetricsSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...
    def close(self) -> None: ...


class NullSink:
    """Accepts everything, writes nothing."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def close(self) -> None:
        pass


def _json_number(value: Any) -> Any:
    """NaN/inf are not JSON: write them as strings so the file stays valid and the fact is kept,
    at any depth (a sample's scores, an episode's infos)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_number(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_number(v) for v in value]
    return value


def encode_line(record: dict[str, Any]) -> bytes:
    return (json.dumps(_json_number(record), allow_nan=False) + "\n").encode()


class JsonlWriter:
    """Append-only JSONL file that a crash cannot corrupt.

    Each record goes out in one ``write(2)`` on an ``O_APPEND`` descriptor and is fsynced, so
    records never interleave and a finished one is on disk. A write cut short (the machine died,
    or SIGKILL arrived between the pages of a long record) can only tear the last line: readers
    skip it (``read_jsonl``), and on opening it is cut off, so appending never glues two records
    together. A last line that is a whole record without its newline (edited by hand, written by
    another tool) is kept, and gets its newline before the first append.
    """

    def __init__(self, path: str | Path, fsync: bool = True):
        self.path = Path(path)
        self.fsync = fsync
        repair_tail(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        data = encode_line(record)
        try:
            written = os.write(self._fd, data)
            if self.fsync:
                os.fsync(self._fd)
        except OSError as e:  # os.write names no file: "[Errno 28] No space left on device" said not which
            raise OSError(e.errno, e.strerror, str(self.path)) from e
        if written != len(data):  # a regular file short-writes only when the disk is full
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes (disk full?)")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def whole_record(line: bytes) -> bool:
    """Whether an unterminated last line is a whole record, not a write cut short: rlxf writes
    one JSON object a line, and no prefix of one cut before its end parses as an object."""
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # JSONDecodeError, or bytes that are not UTF-8 (a character cut in two)
        return False


def repair_tail(path: Path) -> int:
    """Cut a torn last line off ``path``, or end a whole unterminated record with its newline
    (``whole_record``), so that an append starts a line of its own; return how many bytes
    were removed."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return 0
        # walk back to the last newline
        pos = size
        block = 4096
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            chunk = f.read(pos - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                cut = start + nl + 1
                break
            pos = start
        else:
            cut = 0
        f.seek(cut)
        if whole_record(f.read(size - cut)):
            f.write(b"\n")
            return 0
        f.truncate(cut)
        return size - cut


class DamagedFileError(UserInputError):
    """A run file that rlxf wrote cannot be read back; the message names the file and line."""


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All complete records of a JSONL file: a torn last line is ignored, a whole one without
    its newline is kept (``whole_record``)."""
    return list(iter_jsonl(path))


def iter_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """``read_jsonl``'s records one at a time, read as they are asked for (whether a file holds a
    record at all need not parse the whole file)."""
    p = Path(path)
    if not p.exists():
        return
    with open(p, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n") and not whole_record(raw):
                break
            line = raw.strip()
            if line:
                try:
                    record = json.loads(line)
                except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8
                    raise DamagedFileError(
                        f"{p}, line {number}: not a JSON record ({e}). rlxf writes whole lines, so the file "
                        f"was damaged after it was written; delete or repair that line and run again."
                    ) from None
                if not isinstance(record, dict):  # valid JSON, but every reader looks keys up in it
                    raise DamagedFileError(
                        f"{p}, line {number}: a JSON {type(record).__name__}, not a record ({{\"step\": ...}}). "
                        f"rlxf writes one object per line, so the file was edited or damaged after it was "
                        f"written; delete or repair that line and run again."
                    )
                yield record


def truncate_after_step(path: str | Path, step: int) -> int:
    """Drop records with ``step`` > ``step`` (used on resume: the run replays those steps).

    Returns the number of records dropped. Rewrites atomically (temp file + rename).
    """
    p = Path(path)
    records = read_jsonl(p)
    keep = [r for r in records if r.get("step", -1) <= step]
    if len(keep) == len(records) and (not p.exists() or repair_tail(p) == 0):
        return 0
    write_atomically(p, b"".join(encode_line(r) for r in keep))
    return len(records) - len(keep)


class JsonlSink:
    """``metrics.jsonl``: one JSON object per step, ``{"step": N, ...metrics}``."""

    def __init__(self, path: str | Path):
        self._writer = JsonlWriter(path)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._writer.write({"step": step, **metrics})

    def close(self) -> None:
        self._writer.close()


class TensorBoardSink:
    """Event files under ``log_dir``. The writer opens at the first step logged, with that step as
    ``purge_step``: a resumed run replays the steps after its checkpoint, and TensorBoard then
    drops the killed run's events from that step on (as ``truncate_after_step`` does for
    metrics.jsonl) instead of drawing both, the curve doubling back on itself."""

    def __init__(self, log_dir: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:  # tensorboard itself is missing
            raise MissingExtraError("logging.sinks has 'tensorboard': pip install 'rlxf[tensorboard]'") from e
        # made now, as the writer would at the first step: a log_dir that cannot be made (a file of
        # that name, no permission) stops the run at its start (SinkStartError), as a bad W&B key does,
        # instead of a warning after the first step and no TensorBoard for the whole run
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self._summary_writer = SummaryWriter
        self._log_dir = str(log_dir)
        self._writer = None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self._writer is None:
            self._writer = self._summary_writer(log_dir=self._log_dir, purge_step=step)
        try:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()
        except Exception:
            # a writer whose thread failed (a full disk) raises that error at every call after:
            # drop it, so that a retry opens another event file
            broken, self._writer = self._writer, None
            try:
                broken.close()
            except Exception:  # the error being raised says what went wrong
                pass
            raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


# next to metrics.jsonl: the W&B and MLflow runs a run directory logs to, so `--resume` continues
# the same one (``{"wandb": id, "mlflow": run_id}``); without it every resume started a new run
SINK_RUNS = "sink_runs.json"


def _read_by_sink(path: Path, valid: Callable[[Any], bool], shape: str, holds: str) -> dict[str, Any]:
    """A ``{sink: value}`` file of the run (``{}`` when there is none yet); one that is not JSON, or
    whose values are not ``valid``, is an error naming it, its expected ``shape``, what it ``holds``."""
    if not path.exists():
        return {}
    try:
        read = json.loads(path.read_text())
    except ValueError as e:
        read = e
    if not isinstance(read, dict) or not all(valid(v) for v in read.values()):
        raise DamagedFileError(f"{path}: not a JSON object of {shape} ({read}); it holds {holds}")
    return read


def _sink_runs(path: Path) -> dict[str, str]:
    """``SINK_RUNS``'s ``{sink: run id}``; a damaged file is an error naming it."""
    return _read_by_sink(path, lambda v: isinstance(v, str), "run ids",
                         "the W&B / MLflow run this run logs to: repair it, or delete it to log to a new run")


def saved_run_id(run_dir: Path, sink: str) -> str | None:
    """The id of the ``sink`` run that the run in ``run_dir`` logged to before, if any."""
    return _sink_runs(run_dir / SINK_RUNS).get(sink)


def save_run_id(run_dir: Path, sink: str, run_id: str) -> None:
    path = run_dir / SINK_RUNS
    write_atomically(path, (json.dumps({**_sink_runs(path), sink: run_id}, indent=1) + "\n").encode())


# next to SINK_RUNS: the last step each W&B / MLflow run was sent (``{"mlflow": {"run": id, "step": N}}``)
SINK_STEPS = "sink_steps.json"


class SentSteps:
    """Which steps an external run already has, so a resume does not send them again.

    A resumed rlxf run replays the steps after its checkpoint (bit for bit, so with the same
    figures); metrics.jsonl is cut back to the checkpoint and TensorBoard purges, but W&B keeps
    the first copy (warning at every replayed step) and MLflow keeps both, a doubled curve. Steps
    up to the last one a previous process sent to this same run are skipped; within one process
    nothing is (SFT's final evaluation is a second record of its last step). The step is recorded
    after it is sent: a kill in between sends that one step again rather than losing it.
    """

    def __init__(self, run_dir: Path, sink: str, run_id: str | None):
        """``run_id`` None: a run not started yet (nothing sent; set ``run_id`` once it is)."""
        self.path, self.sink, self.run_id = run_dir / SINK_STEPS, sink, run_id
        saved = self._read().get(sink)  # read first: a damaged file stops the sink before its run starts
        self.sent_before = saved["step"] if saved is not None and saved["run"] == run_id else None
        self.last = self.sent_before

    def _read(self) -> dict[str, dict[str, Any]]:
        return _read_by_sink(
            self.path, lambda v: isinstance(v, dict) and isinstance(v.get("run"), str) and type(v.get("step")) is int,
            '{sink: {"run": id, "step": N}}', "the last step each W&B / MLflow run was sent: repair it, or delete "
            "it to send a resume's replayed steps again")

    def new(self, step: int) -> bool:
        """Whether ``step`` is not one a previous process already sent to this run."""
        return self.sent_before is None or step > self.sent_before

    def sent(self, step: int) -> None:
        if self.last is not None and step <= self.last:
            return
        self.last = step
        record = {**self._read(), self.sink: {"run": self.run_id, "step": step}}
        write_atomically(self.path, (json.dumps(record, indent=1) + "\n").encode())


class WandbSink:
    """A W&B run; a resumed rlxf run continues the one it logged to (its id is in ``SINK_RUNS``)."""

    def __init__(self, project: str, name: str, config: dict[str, Any], run_dir: Path):
        try:
            import wandb
        except ImportError as e:
            raise MissingExtraError("logging.sinks has 'wandb': pip install 'rlxf[wandb]'") from e
        run_id = saved_run_id(run_dir, "wandb")
        if run_id is None:  # saved before the run starts: a kill in between still leaves its id
            run_id = os.environ.get("WANDB_RUN_ID") or secrets.token_hex(8)
            save_run_id(run_dir, "wandb", run_id)
        self._sent = SentSteps(run_dir, "wandb", run_id)
        self._run = wandb.init(project=project, name=name, config=config, dir=str(run_dir), id=run_id,
                               resume="allow")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self._sent.new(step):
            self._run.log(metrics, step=step)
            self._sent.sent(step)

    def close(self) -> None:
        self._run.finish()


class MlflowSink:
    """An MLflow run; a resumed rlxf run continues the one it logged to (its id is in ``SINK_RUNS``)."""

    def __init__(self, project: str, name: str, config: dict[str, Any], run_dir: Path):
        try:
            import mlflow
        except ImportError as e:
            raise MissingExtraError("logging.sinks has 'mlflow': pip install 'rlxf[mlflow]'") from e
        self._mlflow = mlflow
        mlflow.set_experiment(project)
        run_id = saved_run_id(run_dir, "mlflow")
        self._sent = SentSteps(run_dir, "mlflow", run_id)
        if run_id is not None:
            # the params were logged at the first start: MLflow refuses to change one, and a resume
            # may change some (train.steps, ...); config.yaml holds what this resume runs with
            mlflow.start_run(run_id=run_id)
            return
        self._sent.run_id = mlflow.start_run(run_name=name).info.run_id
        save_run_id(run_dir, "mlflow", self._sent.run_id)
        flat = _flatten(config)
        mlflow.log_params({mlflow_key(k): str(v)[:500] for k, v in flat.items()})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self._sent.new(step):
            return
        clean = {mlflow_key(k): v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        self._mlflow.log_metrics(clean, step=step)
        self._sent.sent(step)

    def close(self) -> None:
        self._mlflow.end_run()


MLFLOW_NAME = re.compile(r"[^/\w.\- ]")  # what MLflow refuses in a metric name


def mlflow_key(key: str) -> str:
    """``key`` as a name MLflow accepts (letters, digits, ``_ - . /`` and space): metric names hold
    the user's verifier and source names (``reward/judge(gpt)``), params the keys of the user's
    options (``env.options``), and MLflow refused the whole call for one such name."""
    return MLFLOW_NAME.sub("_", key.replace("@", "_at_"))


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


# next to metrics.jsonl: the steps each outside sink could not take (``{"mlflow": [[first, last], ...]}``)
SINK_MISSED = "sink_missed.json"


class OutsideSink:
    """A sink outside metrics.jsonl (TensorBoard, W&B, MLflow) whose failures do not end the run.

    metrics.jsonl is the record and these are conveniences: a tracking server that blinks, or a
    full disk under TensorBoard's events, ended a long run. A failed ``log`` is said once per
    outage (which sink, the error, that metrics.jsonl has every step); the sink is tried again
    after a pause that doubles from ``RETRY_FIRST_S`` to ``RETRY_MAX_S`` (an unreachable server
    can hold each call for minutes of HTTP retries), and the steps it missed are kept in
    ``SINK_MISSED`` and said when it recovers, at the end, and on resume. A failed close is said,
    not raised: the run's work is done.
    """

    RETRY_FIRST_S = 10.0
    RETRY_MAX_S = 600.0

    def __init__(self, name: str, start: Callable[[], MetricsSink], run_dir: Path,
                 clock: Callable[[], float] = time.monotonic):
        """``start()`` starts the sink, once ``SINK_MISSED`` was read (a damaged one stops the run
        before a W&B or MLflow run is started, and left running)."""
        self.name, self.path, self.clock = name, run_dir / SINK_MISSED, clock
        self.failures = 0          # in a row, in this outage
        self.retry_at = 0.0
        self.outage: list[list[int]] = []  # the steps missed in this outage, as ``[first, last]`` runs
        self.missed = self._read().get(name, [])  # in the whole run, earlier processes included
        self.sink = start()
        if self.missed:
            log.warning("logging.sinks %r missed %s before this resume; metrics.jsonl has every step", name,
                        _steps(self.missed))

    def _read(self) -> dict[str, list[list[int]]]:
        return _read_by_sink(
            self.path, lambda v: isinstance(v, list) and all(
                isinstance(r, list) and len(r) == 2 and all(type(s) is int for s in r) for r in v),
            "{sink: [[first, last], ...]}", "the steps each outside sink missed: repair it, or delete it")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.failures and self.clock() < self.retry_at:
            self._missed(step)
            return
        try:
            self.sink.log(step, metrics)
        except Exception as e:  # whatever the backend raises: metrics.jsonl has the step
            if not self.failures:
                log.warning("logging.sinks %r failed at step %d (%s); the run goes on, metrics.jsonl has every "
                            "step, and %s is tried again in %g s (the pause doubles while it fails, up to %g s)",
                            self.name, step, _said(e), self.name, self.RETRY_FIRST_S, self.RETRY_MAX_S)
            self.failures += 1
            self.retry_at = self.clock() + min(self.RETRY_FIRST_S * 2 ** (self.failures - 1), self.RETRY_MAX_S)
            self._missed(step)
            return
        if self.failures:
            log.warning("logging.sinks %r works again from step %d; it missed %s, which metrics.jsonl has",
                        self.name, step, _steps(self.outage))
            self.failures, self.outage = 0, []

    def _missed(self, step: int) -> None:
        _add(self.outage, step)
        _add(self.missed, step)
        try:
            record = {**self._read(), self.name: self.missed}
            write_atomically(self.path, (json.dumps(record) + "\n").encode())
        except (OSError, DamagedFileError) as e:  # the disk that failed TensorBoard: close still says the count
            log.debug("cannot record %s's missed step %d in %s: %s", self.name, step, self.path, e)

    def close(self) -> None:
        try:
            self.sink.close()
        except Exception as e:  # the run is done, and its record is metrics.jsonl
            log.warning("logging.sinks %r failed to close (%s); its run may show as unfinished there, and "
                        "metrics.jsonl has every step", self.name, _said(e))
        if self.missed:
            log.warning("logging.sinks %r missed %s of this run; metrics.jsonl has every step", self.name,
                        _steps(self.missed))


def _said(e: BaseException, limit: int = 300) -> str:
    """An error in one line of at most ``limit`` characters (a server's reply can be a page of HTML)."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _add(ranges: list[list[int]], step: int) -> None:
    """Put ``step`` into ``ranges``, sorted ``[first, last]`` runs of consecutive steps (a long
    outage is one pair, not a list of every step)."""
    if any(lo <= step <= hi for lo, hi in ranges):
        return
    ranges.append([step, step])
    ranges.sort()
    merged = [ranges[0]]
    for lo, hi in ranges[1:]:
        if lo == merged[-1][1] + 1:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    ranges[:] = merged


def _steps(ranges: list[list[int]]) -> str:
    """``3 steps (2-3, 7)``."""
    count = sum(hi - lo + 1 for lo, hi in ranges)
    spans = ", ".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in ranges[:5])
    return f"{count} step{'s' if count != 1 else ''} ({spans}{', ...' if len(ranges) > 5 else ''})"


class MultiSink:
    """Fans one ``log`` call out to several sinks."""

    def __init__(self, sinks: list[MetricsSink]):
        self.sinks = sinks

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, metrics)

    def close(self) -> None:
        """Close every sink, also after one fails; then raise the first failure (metrics.jsonl's:
        an outside sink's, W&B's finish without a network, is said, not raised)."""
        close_all(sink.close for sink in self.sinks)


SINKS: dict[str, Callable[[Path, str, str, dict[str, Any]], MetricsSink]] = {
    "tensorboard": lambda run_dir, project, name, config: TensorBoardSink(run_dir / "tensorboard"),
    "wandb": lambda run_dir, project, name, config: WandbSink(project, name, config, run_dir),
    "mlflow": lambda run_dir, project, name, config: MlflowSink(project, name, config, run_dir),
}


class SinkUnavailableError(UserInputError):
    """A sink in ``logging.sinks`` whose package is not installed."""


class SinkStartError(UserInputError):
    """A sink in ``logging.sinks`` that could not start (no network, a bad tracking URI or key)."""


# what to check when a sink cannot start
SINK_START_HELP = {
    "tensorboard": "check that the run directory can be written",
    "wandb": "check `wandb login` and the network, or set WANDB_MODE=offline and `wandb sync` the run later "
             f"(a resume logs to the run in {SINK_RUNS}: delete it to start another)",
    "mlflow": f"check MLFLOW_TRACKING_URI and that the tracking server is up (a resume logs to the run in "
              f"{SINK_RUNS}: delete it to start another)",
}


def build_sinks(names: list[str], run_dir: Path, *, project: str, run_name: str,
                config: dict[str, Any]) -> MultiSink:
    """metrics.jsonl plus every sink named in ``names`` (``logging.sinks``).

    A sink whose package is not installed is an error (:class:`SinkUnavailableError`) that
    names the extra to install; the config check catches it before a run starts. One that
    cannot start stops the run before it trains (:class:`SinkStartError`: a bad URI or key
    is better found then); once started, its failures no longer stop it (:class:`OutsideSink`).
    """
    sinks: list[MetricsSink] = [JsonlSink(run_dir / "metrics.jsonl")]
    for name in names:
        if name not in SINKS:  # the config schema only admits the names above
            raise ValueError(f"unknown metrics sink {name!r}; valid: {', '.join(SINKS)}")
        try:
            sinks.append(OutsideSink(name, partial(SINKS[name], run_dir, project, run_name, config), run_dir))
        except BaseException as e:  # the sinks opened so far end too (an MLflow run left running, ...)
            close_during(e, MultiSink(sinks).close, "closing the sinks started before it")
            if isinstance(e, ImportError):
                raise SinkUnavailableError(f"{e}, or remove {name!r} from logging.sinks") from None
            if isinstance(e, Exception) and not isinstance(e, UserInputError):
                raise SinkStartError(f"logging.sinks has {name!r}, and it could not start ({_said(e, 1000)}); "
                                     f"{SINK_START_HELP[name]}, or remove {name!r} from logging.sinks "
                                     f"(metrics.jsonl is always written)") from e
            raise
    return MultiSink(sinks)

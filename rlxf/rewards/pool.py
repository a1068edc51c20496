"""Run CPU-bound verifier calls with a per-call time limit, surviving hangs and crashes.

    pool = VerifierPool([math_cfg, format_cfg], workers=2, timeout_s=10)
    futures = pool.submit(0, inputs)          # verifier 0 on each input
    results = [f.result() for f in futures]   # RewardResult or VerifierFailure, never raises

A *lane* runs calls one after another: a worker process (``workers > 0``) or, with
``workers = 0``, a thread of this process. A dispatcher thread hands each idle lane a packet
of calls from one shared queue and watches the clock: the call a lane is on may take
``timeout_s``; past that the call is recorded as a timeout, the lane is killed (a thread is
abandoned, and stopped where it runs Python code) and replaced, and the rest of its packet
goes back to the queue. A worker that dies mid-call (segfault, os._exit, OOM kill) records a
crash for that call the same way.
A verifier that raises records an error. Nothing a verifier does stops the batch. A
replacement that does not become ready within ``start_timeout_s`` counts as one that died while
starting. A cancelled future (a reward server's client hung up) is not run: queued, it is
dropped; a lane whose current call is cancelled is replaced at once (its other calls are
queued again).

Futures are ``concurrent.futures.Future``: usable from threads and, through
``asyncio.wrap_future``, from any event loop.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlxf.rewards.base import raise_in_thread
from rlxf.rewards.types import RewardInput, RewardResult, VerifierFailure, describe_exception

log = logging.getLogger(__name__)
PACKET = 16  # calls handed to a lane at once: fewer round trips, little work lost to a kill
START_ATTEMPTS = 4  # replacements in a row that may die while starting before the pool gives up


@dataclass
class _Call:
    id: int
    verifier: int
    x: RewardInput
    future: Future = field(repr=False)


def _score(verifiers: list[Any], verifier: int, x: RewardInput) -> tuple[bool, Any]:
    try:
        result = verifiers[verifier].score(x)
    except Exception as e:  # noqa: BLE001 - a verifier's exception is that sample's error
        return False, describe_exception(e)
    if not isinstance(result, RewardResult):
        return False, f"{type(verifiers[verifier]).__name__}.score returned {type(result).__name__}, not RewardResult"
    return True, result


# --- lanes -------------------------------------------------------------------------------------

def _worker_entry(fd: int, parent: int) -> None:
    """Entry of a worker process (``python -c``): never re-runs the parent's ``__main__``.

    Ctrl-C and a SIGTERM sent to the whole process group are the pool owner's to handle (a
    trainer finishes and scores its step, then closes the pool, which kills its workers): a
    worker that died of them recorded its call as a crash. It disregards both, and dies with the
    pool (``close``, or the parent-death signal below) or when its pipe closes. (A handler
    that does nothing, not SIG_IGN: an ignored signal stays ignored in the programs a verifier
    runs, which then could not be stopped with SIGTERM.)"""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _disregard)
    if sys.platform == "linux":  # die with the pool's dispatcher thread, even if hung in a call
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            return
    conn = multiprocessing.connection.Connection(fd)
    sys_path, configs = pickle.loads(conn.recv_bytes())
    sys.path[:] = sys_path  # custom verifiers import like they would in the parent
    _worker_main(conn, configs)


def _disregard(signum: int, frame: Any) -> None:
    """A signal handler that does nothing (see ``_worker_entry``)."""


def _worker_main(conn: multiprocessing.connection.Connection, configs: list[Any]) -> None:
    """A worker process: build the verifiers, then score packets until the pipe closes."""
    from rlxf.rewards.base import build_verifier  # noqa: PLC0415 - in the child

    try:
        verifiers = [build_verifier(c) for c in configs]
    except Exception as e:  # noqa: BLE001
        conn.send_bytes(pickle.dumps(("init_error", describe_exception(e))))
        return
    conn.send_bytes(pickle.dumps(("ready", os.getpid())))
    while True:
        try:
            packet = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        for call_id, verifier, x in packet:
            ok, payload = _score(verifiers, verifier, x)
            conn.send_bytes(pickle.dumps(("done", call_id, ok, payload)))


class _Lane:
    """A runner of packets; ``events()`` yields ("ready"|"init_error"|"done", ...) tuples."""

    def __init__(self) -> None:
        self.ready = False
        self.packet: collections.deque[_Call] = collections.deque()
        self.started = 0.0  # when the call at the head of the packet started
        self.created = time.monotonic()  # a lane not ready by created + start_timeout_s is dead

    @property
    def busy(self) -> bool:
        return bool(self.packet) or not self.ready


class _ProcessLane(_Lane):
    """A worker process started with ``python -c`` and a socket pair (no ``multiprocessing``
    spawn: that re-imports the parent's main script, which may not be import-safe)."""

    def __init__(self, configs: list[Any]):
        super().__init__()
        mine, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])
        code = (f"import sys; sys.path.insert(0, {root!r}); from rlxf.rewards.pool import _worker_entry; "
                f"_worker_entry({theirs.fileno()}, {os.getpid()})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()], close_fds=True)
        theirs.close()
        self.conn = multiprocessing.connection.Connection(mine.detach())
        self.conn.send_bytes(pickle.dumps((list(sys.path), configs)))

    def fileno(self) -> int:
        return self.conn.fileno()

    def send(self, calls: list[_Call]) -> None:
        self.conn.send_bytes(pickle.dumps([(c.id, c.verifier, c.x) for c in calls]))

    def events(self) -> list[tuple]:
        """What the worker sent; EOFError once it is dead and everything it sent was read."""
        out = []
        while self.conn.poll():
            try:
                out.append(pickle.loads(self.conn.recv_bytes()))
            except EOFError:
                if out:  # deliver its last words first (e.g. an init error); EOF on the next call
                    break
                raise
        return out

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.conn.close()


class _Abandoned(SystemExit):
    """Raised inside an abandoned lane's thread to end the call it is stuck in. A SystemExit:
    ``except Exception`` in a verifier does not catch it, and a thread ends on it silently."""


class _ThreadLane(_Lane):
    """In-process lane: a daemon thread. A hung call cannot be killed: ``kill`` abandons the
    thread and raises ``_Abandoned`` in it, which ends a call running Python code at its next
    bytecode (one blocked in C, e.g. a long regex match or a sleep, ends when that returns);
    before, an abandoned call kept computing, and every timeout added a busy thread."""

    def __init__(self, verifiers: list[Any]):
        super().__init__()
        self.ready = True
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()
        self.abandoned = False
        self.in_call = False  # the thread is inside a verifier call (set and read under _state)
        self._state = threading.Lock()
        self.thread = threading.Thread(target=self._run, args=(verifiers,), daemon=True,
                                       name="rlxf-reward-lane")
        self.thread.start()

    def _run(self, verifiers: list[Any]) -> None:
        try:
            self._serve(verifiers)
        except _Abandoned:  # raised by ``kill``: only while in a call, so always caught here
            pass

    def _serve(self, verifiers: list[Any]) -> None:
        while True:
            packet = self.inbox.get()
            if packet is None:
                return
            for call_id, verifier, x in packet:
                with self._state:
                    if self.abandoned:
                        return
                    self.in_call = True
                try:
                    result = _score(verifiers, verifier, x)
                finally:
                    with self._state:
                        self.in_call = False
                if self.abandoned:
                    return
                self.outbox.put(("done", call_id, *result))
                try:
                    os.write(self.wake_w, b"x")
                except OSError:  # killed meanwhile
                    return

    def fileno(self) -> int:
        return self.wake_r

    def send(self, calls: list[_Call]) -> None:
        self.inbox.put([(c.id, c.verifier, c.x) for c in calls])

    def events(self) -> list[tuple]:
        os.read(self.wake_r, 1 << 16)
        out = []
        while True:
            try:
                out.append(self.outbox.get_nowait())
            except queue.Empty:
                return out

    def kill(self) -> None:
        with self._state:
            self.abandoned = True
            if self.in_call:  # (so the exception lands inside ``_run``, never after it returned)
                raise_in_thread(self.thread.ident, _Abandoned)
        self.inbox.put(None)
        for fd in (self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


# --- the pool --------------------------------------------------------------------------------

class VerifierPool:
    """Score calls of ``configs``' verifiers on lanes; see the module doc.

    Args:
        configs: verifier configs (built inside each worker) -- or, with ``workers=0``,
            ``verifiers``: already built verifier objects to run on one in-process thread.
        workers: worker processes; 0 = one in-process thread lane.
        timeout_s: time limit per call.
    """

    def __init__(self, configs: list[Any] | None = None, *, workers: int = 0, timeout_s: float = 30.0,
                 verifiers: list[Any] | None = None, start_timeout_s: float = 120.0):
        if workers > 0 and configs is None:
            raise ValueError("VerifierPool with workers > 0 needs the verifier configs to build in each worker")
        if workers == 0 and verifiers is None:
            from rlxf.rewards.base import build_verifier  # noqa: PLC0415

            verifiers = [build_verifier(c) for c in configs or []]
        self.workers = workers
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self._configs = configs
        self._verifiers = verifiers
        self._pending: collections.deque[_Call] = collections.deque()
        self._lock = threading.Lock()
        self._ids = 0
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False
        self._cancelled = False  # a future was cancelled since the dispatcher last looked
        self.counts = {"timeouts": 0, "crashes": 0, "restarts": 0}
        self._start_failures = 0  # replacements in a row that died before becoming ready
        self.broken: str | None = None  # set once no worker can be started: every call fails with it
        self._lanes: list[_Lane] = []
        # Workers are started by the dispatcher thread: their parent-death signal follows the
        # thread that forked them, and this one lives exactly as long as the pool.
        self._started = threading.Event()
        self._start_error: str | None = None
        self._thread = threading.Thread(target=self._run, args=(start_timeout_s,), daemon=True,
                                        name="rlxf-reward-pool")
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self.close()
            raise RuntimeError(self._start_error)

    def _new_lane(self) -> _Lane:
        if self.workers == 0:
            return _ThreadLane(self._verifiers)
        return _ProcessLane(self._configs)

    def _run(self, start_timeout_s: float) -> None:
        try:
            self._lanes.extend(self._new_lane() for _ in range(max(1, self.workers)))
            self._start_error = self._wait_ready(start_timeout_s)
        except Exception as e:  # noqa: BLE001 - reported to the constructor
            self._start_error = f"reward workers failed to start: {describe_exception(e)}"
        self._started.set()
        if self._start_error is None:
            self._dispatch()

    def _wait_ready(self, timeout: float) -> str | None:
        """Wait until every worker has built its verifiers; the first problem, or None."""
        deadline = time.monotonic() + timeout
        for lane in self._lanes:
            while not lane.ready:
                left = deadline - time.monotonic()
                if left <= 0 or not multiprocessing.connection.wait([lane], left):
                    return f"a reward worker did not start within {timeout:.0f}s"
                try:
                    for event in lane.events():
                        self._on_event(lane, event)
                except EOFError:
                    return "a reward worker died while starting (its error is printed above)"
            if getattr(lane, "init_error", None):
                return f"a reward worker could not build its verifiers: {lane.init_error}"  # type: ignore[attr-defined]
        return None

    # -- public ---------------------------------------------------------------------------------

    def submit(self, verifier: int, inputs: list[RewardInput]) -> list[Future]:
        """Queue ``verifier`` (an index into the configs) on each input; one future per input,
        resolving to a ``RewardResult`` or a ``VerifierFailure``."""
        if self._closed:
            raise RuntimeError("the verifier pool is closed")
        futures = []
        with self._lock:
            for x in inputs:
                future: Future = Future()
                if self.broken is not None:  # no worker left to run it: fail at once
                    future.set_result(VerifierFailure("crash", self.broken))
                    futures.append(future)
                    continue
                self._ids += 1
                self._pending.append(_Call(self._ids, verifier, x, future))
                future.add_done_callback(self._wake_if_cancelled)
                futures.append(future)
        os.write(self._wake_w, b"x")
        return futures

    def _wake_if_cancelled(self, future: Future) -> None:
        if future.cancelled() and not self._closed:
            self._cancelled = True
            try:
                os.write(self._wake_w, b"x")
            except OSError:  # closed meanwhile
                pass

    def close(self) -> None:
        """Stop the dispatcher and the workers; unfinished calls fail with a crash."""
        if self._closed:
            return
        self._closed = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if threading.current_thread() is not self._thread:
            self._thread.join(10)
        for lane in self._lanes:
            for call in lane.packet:
                self._finish(call, VerifierFailure("crash", "the reward pool was closed"))
            lane.kill()
        while self._pending:
            self._finish(self._pending.popleft(), VerifierFailure("crash", "the reward pool was closed"))
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- dispatcher -----------------------------------------------------------------------------

    def _dispatch(self) -> None:
        while not self._closed:
            self._assign()
            now = time.monotonic()
            busy = [lane for lane in self._lanes if lane.packet]
            deadlines = [lane.started + self.timeout_s for lane in busy]
            deadlines += [lane.created + self.start_timeout_s for lane in self._lanes if not lane.ready]
            wait = max(0.0, min(deadlines) - now) if deadlines else None
            ready = multiprocessing.connection.wait([self._wake_r, *self._lanes], wait)
            if self._wake_r in ready:
                os.read(self._wake_r, 1 << 16)
            for lane in list(self._lanes):
                if lane in ready:
                    try:
                        for event in lane.events():
                            self._on_event(lane, event)
                    except (EOFError, OSError):
                        self._replace(lane, "crash", "the reward worker process died during this call")
            if self._cancelled:
                self._drop_cancelled()
            now = time.monotonic()
            for lane in list(self._lanes):
                if lane.packet and now - lane.started > self.timeout_s:
                    self._replace(lane, "timeout", f"no result within reward.timeout_s={self.timeout_s:g}s")
                elif not lane.ready and now - lane.created > self.start_timeout_s:
                    self._start_failed(lane, f"a replacement reward worker was not ready within "
                                             f"{self.start_timeout_s:g}s")

    def _drop_cancelled(self) -> None:
        """Nobody waits for a cancelled call: drop the queued ones, and replace a lane whose
        current call is cancelled rather than let it finish it (or hang in it to its time limit)
        while live calls wait behind it; those go back to the front of the queue."""
        self._cancelled = False
        with self._lock:
            self._pending = collections.deque(c for c in self._pending if not c.future.cancelled())
        for lane in list(self._lanes):
            if lane.ready and lane.packet and lane.packet[0].future.cancelled():
                live = [c for c in lane.packet if not c.future.cancelled()]
                with self._lock:
                    self._pending.extendleft(reversed(live))
                lane.packet.clear()
                lane.kill()
                self._lanes.remove(lane)
                log.info("reward calls cancelled by their caller: %s", "replacing their worker" if self.workers
                         else "abandoning their thread")
                if not self._closed:
                    self._lanes.append(self._new_lane())

    def _assign(self) -> None:
        with self._lock:
            for lane in self._lanes:
                if lane.busy or not self._pending:
                    continue
                share = max(1, min(PACKET, len(self._pending) // len(self._lanes)))
                calls = []
                while self._pending and len(calls) < share:
                    call = self._pending.popleft()
                    if not call.future.cancelled():  # cancelled since ``_drop_cancelled`` looked
                        calls.append(call)
                if not calls:
                    continue
                lane.packet.extend(calls)
                lane.started = time.monotonic()
                try:
                    lane.send(calls)
                except (OSError, ValueError, BrokenPipeError):
                    pass  # the worker is dead: the next wait sees EOF and replaces it

    def _on_event(self, lane: _Lane, event: tuple) -> None:
        kind = event[0]
        if kind == "ready":
            lane.ready = True
            self._start_failures = 0
        elif kind == "init_error":
            lane.init_error = event[1]  # type: ignore[attr-defined]
            if self._started.is_set():  # a replacement that cannot start
                self._start_failed(lane, f"a reward worker could not rebuild its verifiers: {event[1]}")
            else:
                lane.ready = True
        elif kind == "done":
            _, call_id, ok, payload = event
            if lane.packet and lane.packet[0].id == call_id:
                call = lane.packet.popleft()
                self._finish(call, payload if ok else VerifierFailure("error", payload))
                lane.started = time.monotonic()
                if lane.packet and lane.packet[0].future.cancelled():  # it runs one nobody waits for
                    self._cancelled = True

    def _start_failed(self, lane: _Lane, message: str) -> None:
        """A replacement died (or failed) while starting: retry a few times with a backoff, then,
        with no lane left, mark the pool broken so every queued and later call fails at once."""
        log.error("%s", message)
        lane.kill()
        self._lanes.remove(lane)
        if self._closed:
            return
        self._start_failures += 1
        if self._start_failures < START_ATTEMPTS:
            time.sleep(min(2.0, 0.25 * 2 ** (self._start_failures - 1)))
            try:
                self._lanes.append(self._new_lane())
                log.warning("starting another reward worker (attempt %d of %d)", self._start_failures + 1,
                            START_ATTEMPTS)
                return
            except Exception as e:  # noqa: BLE001 - e.g. out of processes: give up below
                message = f"{message}; starting another failed: {describe_exception(e)}"
        if self._lanes:
            return
        with self._lock:
            self.broken = (f"no reward worker could be started ({START_ATTEMPTS} attempts in a row failed; "
                           f"last: {message})")
            log.error("%s: every reward call now fails", self.broken)
            while self._pending:
                self._finish(self._pending.popleft(), VerifierFailure("crash", self.broken))

    def _replace(self, lane: _Lane, kind: str, message: str) -> None:
        """Fail the lane's current call, requeue the rest, start a fresh lane."""
        if not lane.ready:  # died while starting: retry a bounded number of times
            self._start_failed(lane, "a replacement reward worker died while starting")
            return
        self.counts["timeouts" if kind == "timeout" else "crashes"] += 1
        if lane.packet:
            self._finish(lane.packet.popleft(), VerifierFailure(kind, message))  # type: ignore[arg-type]
        with self._lock:
            self._pending.extendleft(reversed(lane.packet))
        lane.packet.clear()
        lane.kill()
        self._lanes.remove(lane)
        if self._closed:
            return
        self.counts["restarts"] += 1
        log.warning("reward %s: %s; %s", "worker" if self.workers else "lane", message,
                    "replacing it" if self.workers else "abandoning its thread")
        self._lanes.append(self._new_lane())

    @staticmethod
    def _finish(call: _Call, value: Any) -> None:
        """Resolve the call's future, unless its caller cancelled it (which may happen at any
        moment, from another thread: checking ``done()`` first would leave a race)."""
        try:
            call.future.set_result(value)
        except InvalidStateError:   # cancelled (or already resolved): nobody waits for it
            pass

"""A rollout engine in its own process: ``rollout.mode: async`` under ``run.placement: local``.

    trainer process                                   engine process (spawned, one core)
    EngineProcess.submit(request, sampling) -> id  ──▶ commands ──▶ queue of waiting requests
    EngineProcess.update_weights(params, v)        ──▶ shared-memory copy, then ("weights", v)
    EngineProcess.ready() -> [(id, completions)]   ◀── pipe ◀── each group as it finishes

The engine decodes whatever requests are waiting in one continuous batch; requests that arrive
meanwhile wait for the next batch. Commands are read between decode steps, so new weights are
loaded mid-batch: the sequences still decoding continue under them and their later tokens carry
the new version (a partial rollout, ``Completion.token_versions``). The KV cache written under
the old weights is kept, as AReaL and slime do.

Weights travel once through shared memory: the trainer copies its parameters into one
shared buffer per tensor and sends only the version number; it writes the next version only
after the engine has acknowledged loading the previous one, so the engine never reads a torn
copy. Decoding in another process means it no longer competes with training for the GIL.

If the engine process dies (killed, out of memory), the next call that waits on it notices,
starts a new one from the latest weights and resubmits every request not yet answered (a seeded
request samples the same tokens again), up to ``max_restarts`` times. No Ray is imported.

If the trainer dies without closing it (``kill -9``, out of memory), the engine exits too rather
than hold the model (and a GPU's KV cache) forever: on Linux the kernel kills it
(``PR_SET_PDEATHSIG``); elsewhere, and as a backstop, it checks its parent pid while it waits.

Several threads of the trainer may use one ``EngineProcess`` at once (``rollout.mode: async`` with
``env:`` runs each submitted set of groups' episodes in a thread of its own, whose model turns
``generate`` waits for, while the trainer's thread sends weights and evaluates). One thread at a
time reads the engine's messages and files each answer under its request id; the others wait on
a condition until theirs is filed. What ``generate`` waits for is never handed out by ``ready``.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import os
import queue
import signal
import sys
import threading
import time
import traceback
import types
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp

from rlxf.rollout.base import (
    DecodeHooks,
    GenerationRequest,
    RequestLike,
    SamplingParams,
    as_requests,
    check_sampling_params,
)
from rlxf.rollout.sampling import derive_seed
from rlxf.types import Completion

log = logging.getLogger("rlxf")

POLL_S = 0.2  # how often a waiting trainer checks that the engine process is still alive
PARENT_POLL_S = 1.0  # how often an idle engine checks that its trainer is still alive
PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h


class EngineLost(RuntimeError):
    """The engine process died more often than ``max_restarts`` allows, or raised an error."""


@dataclass
class EngineRecipe:
    """What the engine process builds its engine from: the architecture (no weights: they
    arrive through shared memory), the tokenizer, and the ``rollout:`` section."""

    hf_config: Any              # transformers PretrainedConfig of the policy
    generation_config: Any      # its GenerationConfig (eos ids)
    tokenizer: Any
    rollout: Any                # rlxf.config.rollout.RolloutConfig
    dtype: torch.dtype
    device: str                 # where the engine decodes (the policy's device)
    seed: int                   # the engine's generator (seeds unseeded requests)

    @classmethod
    def of(cls, model, tokenizer, rollout, seed: int) -> EngineRecipe:
        from rlxf.models.loading import unwrap_model

        base = unwrap_model(model)
        return cls(hf_config=base.config, generation_config=getattr(base, "generation_config", None),
                   tokenizer=tokenizer, rollout=rollout, dtype=next(base.parameters()).dtype,
                   device=str(next(base.parameters()).device), seed=seed)

    def build(self):
        """The engine, with freshly initialised weights (the caller loads the real ones)."""
        from transformers import AutoModelForCausalLM

        from rlxf.rollout.registry import build_engine_from_config

        model = AutoModelForCausalLM.from_config(self.hf_config, dtype=self.dtype)
        if self.generation_config is not None:
            model.generation_config = self.generation_config
        one_worker = self.rollout.model_copy(update={"threads": 1})  # weights swap between decode steps
        return build_engine_from_config(one_worker, model.to(self.device), self.tokenizer, device=self.device,
                                        dtype=self.dtype, seed=self.seed)


@contextlib.contextmanager
def _caller_script_hidden():
    """Start a spawned process without it re-running the caller's script: spawn imports the
    parent's ``__main__`` file in the child first, and a script that calls ``rlxf.train`` without
    an ``if __name__ == "__main__":`` guard would start a second run there, which fails, while this
    process waits for ever to hand the child its arguments. The engine needs nothing of that
    script (its target and arguments are rlxf's), so the child is shown an empty ``__main__``."""
    real = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = real


class EngineProcess:
    """The trainer's handle on an engine running in a spawned process (see the module docstring).

    It is an ``Engine`` (``generate`` blocks until its requests are answered, for evaluation)
    and a stream: ``submit`` returns at once, ``ready`` hands back the groups finished so far.
    """

    name = "process"

    def __init__(self, recipe: EngineRecipe, named_tensors: Iterable[tuple[str, torch.Tensor]], *,
                 version: int = 0, max_restarts: int = 3):
        self.recipe = recipe
        self.max_restarts = max_restarts
        self.restarts = 0
        self.policy_version = int(version)   # the newest version written to the shared buffer
        self._weights = {name: t.detach().to("cpu", copy=True).contiguous().share_memory_()
                         for name, t in named_tensors}
        self._ctx = mp.get_context("spawn")
        self._ids = itertools.count()
        self._inflight: dict[int, tuple[Any, SamplingParams]] = {}   # submitted, not yet answered
        self._done: dict[int, list[Completion]] = {}                 # answered, not yet handed out
        self._awaited: set[int] = set()      # ids a ``generate`` call waits for: not ``ready``'s to hand out
        self._cond = threading.Condition(threading.RLock())  # guards all of the above (several threads)
        self._reading = False                # a thread is polling the pipe outside the lock
        self._failed: EngineLost | None = None  # the engine reported an error: every waiter raises it
        self._closed = False
        self._loaded = -1                    # the newest version the engine acknowledged loading
        self._idle_s, self._idle_since = 0.0, None  # the engine's waiting time (its clock: monotonic)
        self._idle_before = 0.0              # waiting time of the engine processes that died
        self._spawner = _Spawner()
        self._start()

    # -- the engine interface ------------------------------------------------------------------
    def generate(self, requests: Sequence[RequestLike], sampling: SamplingParams) -> list[list[Completion]]:
        with self._cond:
            ids = [self.submit(r, sampling, index=i) for i, r in enumerate(as_requests(requests))]
            self._awaited.update(ids)
        try:
            self._wait(lambda: all(i in self._done for i in ids))
            with self._cond:
                return [self._done.pop(i) for i in ids]
        finally:
            with self._cond:
                self._awaited.difference_update(ids)
                for i in ids:  # a call that failed leaves nothing behind for ``ready`` (nor in flight)
                    self._done.pop(i, None)
                    self._inflight.pop(i, None)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Write the weights into shared memory and tell the engine (it loads them between decode
        steps). Waits first until the engine has loaded the previous version (it has, unless it
        is in one very long decode step), so that it never copies a half-written buffer."""
        while True:
            self._wait(lambda: self._loaded >= self.policy_version)
            with self._cond, torch.no_grad():
                if self._loaded < self.policy_version:  # a restart in another thread since the wait: its
                    continue                            # new engine reads the buffer as it starts; wait again
                for name, tensor in named_tensors:
                    self._weights[name].copy_(tensor.detach())
                self.policy_version = int(version)
                self._commands.put(("weights", self.policy_version))
                return

    # -- the stream interface ------------------------------------------------------------------
    def submit(self, request: RequestLike, sampling: SamplingParams, index: int = 0) -> int:
        """Queue one request (n samples of one prompt); returns its id at once.

        An unseeded request under ``sampling.seed`` gets its seed here, as request ``index`` of
        the call: in the engine process it shares a batch with whatever else is waiting, and its
        place there (or after a restart) must not choose its samples."""
        # here, not only in the engine: refused there, it would come back as a failed engine process
        check_sampling_params(sampling, vocab_size=self.recipe.hf_config.vocab_size,
                              engine=f"{self.recipe.rollout.backend} (in its own process)")
        (request,) = as_requests([request])
        if request.seed is None and sampling.seed is not None:
            request = GenerationRequest(request.prompt_ids, seed=derive_seed(sampling.seed, index))
        with self._cond:
            self._check_usable()
            rid = next(self._ids)
            self._inflight[rid] = (request, sampling)
            self._commands.put(("generate", rid, request, sampling))
        return rid

    def ready(self, timeout: float | None = None) -> list[tuple[int, list[Completion]]]:
        """The groups answered since the last call, as (id, completions); waits up to ``timeout``
        seconds (None: as long as it takes) for at least one when none is there yet."""
        self._drain()
        self._wait(lambda: bool(self._done.keys() - self._awaited), timeout)
        with self._cond:
            out = [(rid, self._done.pop(rid)) for rid in list(self._done) if rid not in self._awaited]
        return out

    def idle_seconds(self) -> float:
        """Seconds the engine has spent waiting for requests, over every process it ran in: a
        running total (a restart does not set it back, so per-step differences stay >= 0)."""
        self._drain()
        return self._idle_before + self._idle_now()

    def _idle_now(self) -> float:
        """The current engine process's waiting time, as of its last message and the clock."""
        waiting = time.monotonic() - self._idle_since if self._idle_since is not None else 0.0
        return self._idle_s + waiting

    def close(self) -> None:
        with self._cond:
            self._closed = True             # threads still waiting raise EngineLost instead
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._reading)   # the pipe is closed by no one mid-poll
            self._close_process()

    def _close_process(self) -> None:
        if self._proc is None:
            return
        try:
            self._commands.put(("close",))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # read on, so its last messages do not block its exit
                if self._results.poll(0.1):
                    self._results.recv()
                elif not self._proc.is_alive():
                    break
        except (EOFError, OSError):  # it closed its end: it is exiting
            pass
        finally:
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._proc = None
            self._results.close()
            self._commands.cancel_join_thread()
            self._commands.close()
            self._spawner.close()

    # -- the process -------------------------------------------------------------------------------
    def _start(self) -> None:
        self._commands = self._ctx.Queue()
        self._results, writer = self._ctx.Pipe(duplex=False)
        self._loaded = -1
        self._proc = self._ctx.Process(target=serve, name="rlxf-engine", daemon=True,
                                       args=(self.recipe, self._weights, self.policy_version, self._commands, writer,
                                             os.getpid()))
        self._spawner.start(self._proc)
        # the engine now holds the only write end: if it dies, even halfway through a message,
        # reading ends (EOF) instead of waiting forever for the rest
        writer.close()
        for rid, (request, sampling) in self._inflight.items():
            self._commands.put(("generate", rid, request, sampling))

    def _restart(self) -> None:
        code = self._proc.exitcode
        self.restarts += 1
        if self.restarts > self.max_restarts:
            self._failed = EngineLost(f"the engine process died {self.restarts} times (last exit code {code}); "
                                      f"giving up after max_restarts={self.max_restarts}")
            raise self._failed
        log.warning("the engine process died (exit code %s); starting a new one and retrying %d requests "
                    "(restart %d of %d)", code, len(self._inflight), self.restarts, self.max_restarts)
        self._commands.cancel_join_thread()
        self._commands.close()
        self._results.close()
        # the new process counts its waiting from 0; keep what the dead one waited
        self._idle_before += self._idle_now()
        self._idle_s, self._idle_since = 0.0, None
        self._start()

    def _check_usable(self) -> None:
        if self._failed is not None:   # a fresh one per waiter: one object raised in each would pile up their frames
            raise EngineLost(str(self._failed))
        if self._closed:
            raise EngineLost("the engine process was closed while this call waited for it")

    def _wait(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait until ``done()`` (True) or ``timeout`` seconds pass (False). The thread that finds
        no other reading polls the pipe, with the lock released so that others may submit and
        check their own answers, and files what it reads; the others wait to be told."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not done():
                self._check_usable()
                left = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
                if left <= 0:
                    return False
                if self._reading:
                    self._cond.wait(left)
                    continue
                self._reading = True
                try:
                    self._cond.release()
                    try:
                        arrived = self._poll(left)
                    finally:
                        self._cond.acquire()
                    self._take_in(arrived)
                finally:
                    self._reading = False
                    self._cond.notify_all()
        return True

    def _drain(self) -> None:
        """Take in every message already sent, without waiting (unless another thread is reading:
        it takes them in)."""
        with self._cond:
            if self._reading:
                return
            self._check_usable()
            while self._take_in(self._poll(0)):
                pass
            self._cond.notify_all()

    def _poll(self, timeout: float) -> bool | None:
        """Whether a message is waiting (within ``timeout`` seconds); None: the engine's end closed."""
        try:
            return self._results.poll(timeout)
        except (EOFError, OSError):
            return None

    def _take_in(self, arrived: bool | None) -> bool:
        """File the waiting message (under the lock), or restart an engine found dead. Returns
        whether a message was taken in."""
        if arrived:
            try:
                message = self._results.recv()
            except (EOFError, OSError):  # the engine's end closed, halfway through a message
                arrived = None
            else:
                self._receive(message)
                return True
        if arrived is False and self._proc.is_alive():
            return False
        self._proc.join(timeout=10)
        self._restart()
        return False

    def _receive(self, message: tuple) -> None:
        kind = message[0]
        if kind == "group":
            _, rid, completions = message
            if self._inflight.pop(rid, None) is not None:
                self._done[rid] = completions
        elif kind == "loaded":
            self._loaded = max(self._loaded, message[1])
        elif kind == "idle":
            self._idle_s, self._idle_since = message[1], message[2]
        elif kind == "error":
            self._failed = EngineLost(f"the engine process failed:\n{message[1]}")
            raise self._failed


def serve(recipe: EngineRecipe, weights: dict[str, torch.Tensor], version: int, commands, connection,
          parent: int) -> None:
    """The engine process's main function: build the engine, load ``weights`` as ``version``,
    then answer commands until told to close. Ctrl-C and a SIGTERM sent to the whole process
    group (a scheduler's, a terminal's) are the trainer's to handle: it finishes its step with
    this engine, checkpoints, then closes it. So this process disregards SIGINT and SIGTERM (it
    used to die of the SIGTERM, and the trainer then restarted it to finish the step), with a
    handler that does nothing rather than SIG_IGN, which the programs it starts would inherit.
    It exits when told to close, or when its trainer, process ``parent``, dies (``_die_with``)."""
    _die_with(parent)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _disregard)
    torch.set_num_threads(1)
    results = _Outbox(connection)
    try:
        engine = recipe.build()
        engine.update_weights(weights.items(), version=version)
        results.put(("loaded", version))
        _Server(engine, weights, commands, results, parent).run()
    except _Closing:
        pass
    except _Orphaned:  # nobody is left to read a message or wait for a clean close
        os._exit(1)
    except BaseException:  # noqa: BLE001 - reported to the trainer, which raises it
        results.put(("error", traceback.format_exc()))
    finally:
        results.close()


def _disregard(signum: int, frame: Any) -> None:
    """A signal handler that does nothing (see ``serve``)."""


def _die_with(parent: int) -> None:
    """Have the kernel SIGKILL this process when the trainer dies (Linux). The signal is armed
    only from now on: a trainer that died before, while this process was starting, left it to a
    new parent already, so that is checked right after. (It fires when the thread that started
    this process exits: ``_Spawner`` starts every engine from a thread that outlives it.)"""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class _Spawner:
    """Starts each engine process from one thread that lives as long as the ``EngineProcess``.
    The kernel's death signal (``_die_with``) fires when the *thread* that started a process
    exits, and a restart happens in whichever thread found the engine dead: an episode thread of
    async mode ends with its episodes, and the engine it had started was killed with it."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="rlxf-engine-spawner", daemon=True)
        self.thread.start()

    def start(self, proc) -> None:
        """``proc.start()``, in the spawner's thread; raises what it raised."""
        if self.closed:   # its thread is gone: nothing would answer
            raise EngineLost("the engine process was closed; it is not started again")
        outcome: queue.SimpleQueue = queue.SimpleQueue()
        self.jobs.put((proc, outcome))
        error = outcome.get()
        if error is not None:
            raise error

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            proc, outcome = job
            try:
                with _caller_script_hidden():
                    proc.start()
            except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
                outcome.put(e)
            else:
                outcome.put(None)

    def close(self) -> None:
        self.closed = True
        self.jobs.put(None)


class _Outbox:
    """The engine's messages to the trainer, written to the pipe by a thread of their own: the
    trainer reads only when it waits for the engine, and a full pipe must not stop decoding."""

    def __init__(self, connection):
        self.connection = connection
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._send, name="rlxf-engine-outbox", daemon=True)
        self.thread.start()

    def put(self, message: tuple) -> None:
        self.queue.put(message)

    def _send(self) -> None:
        while (message := self.queue.get()) is not None:
            self.connection.send(message)

    def close(self) -> None:
        """Send what is queued, then close the pipe."""
        self.queue.put(None)
        self.thread.join()
        self.connection.close()


class _Closing(Exception):
    """The trainer asked the engine to close (raised out of a decode step)."""


class _Orphaned(Exception):
    """The trainer died without closing the engine (found while waiting for a command)."""


class _Server:
    """The engine process's loop: wait for requests, decode the waiting ones as one batch
    (reading commands between decode steps), send each group back as it finishes."""

    def __init__(self, engine, weights: dict[str, torch.Tensor], commands, results, parent: int):
        self.engine, self.weights, self.commands, self.results = engine, weights, commands, results
        self.parent = parent  # the trainer's pid: a different parent means it died
        self.waiting: deque[tuple[int, Any, SamplingParams]] = deque()
        self.idle_s = 0.0
        self.streams = engine.name == "native"  # the hf backend answers a batch at its end only

    def run(self) -> None:
        while True:
            if not self.waiting:
                t0 = time.monotonic()
                self.results.put(("idle", self.idle_s, t0))
                self.handle(self._next_command())
                self.idle_s += time.monotonic() - t0
                self.results.put(("idle", self.idle_s, None))
            self.drain()
            if self.waiting:
                self.decode()

    def _next_command(self) -> tuple:
        """The next command, however long it takes to come, unless the trainer dies meanwhile:
        the portable backstop to the death signal (a process outliving its parent is re-parented)."""
        while True:
            try:
                return self.commands.get(timeout=PARENT_POLL_S)
            except queue.Empty:
                if os.getppid() != self.parent:
                    raise _Orphaned from None

    def drain(self) -> None:
        while True:
            try:
                self.handle(self.commands.get_nowait())
            except queue.Empty:
                return

    def handle(self, command: tuple) -> None:
        kind = command[0]
        if kind == "generate":
            self.waiting.append(command[1:])
        elif kind == "weights":
            self.engine.update_weights(self.weights.items(), version=command[1])
            self.results.put(("loaded", command[1]))
        elif kind == "close":
            raise _Closing

    def decode(self) -> None:
        """Every waiting request with the first one's sampling parameters, as one batch."""
        sampling = self.waiting[0][2]
        batch = [w for w in self.waiting if w[2] == sampling]
        self.waiting = deque(w for w in self.waiting if w[2] != sampling)
        ids = [w[0] for w in batch]

        def send(i: int, completions: list[Completion]) -> None:
            self.results.put(("group", ids[i], completions))

        requests = [w[1] for w in batch]
        if self.streams:
            self.engine.generate(requests, sampling, DecodeHooks(on_group=send, between_steps=self.drain))
        else:
            for i, group in enumerate(self.engine.generate(requests, sampling)):
                send(i, group)

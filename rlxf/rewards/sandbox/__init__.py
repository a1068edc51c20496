"""Run untrusted Python programs (model-written code) against test cases, in isolation.

    with Sandbox(SandboxLimits(cpu_s=2)) as box:
        result = box.run("print(int(input()) * 2)", [TestCase.stdio("21\\n")])
        result.tests[0].status, result.tests[0].stdout   # ("ok", "42\\n")

Each ``Sandbox`` keeps up to ``concurrency`` long-lived server processes (``_server.py``), one
job at a time each. A server forks a fresh, isolated process tree per program and a fresh
process per test case, so a program costs a few forks, not an interpreter start-up (see
``_server.py`` for the process layout and the mechanisms).

Isolation (``isolation=``):

- ``"strict"`` (default): network, mount, PID, IPC and user namespaces, a read-only minimal
  root, a private size-limited /tmp, an unprivileged uid (``sandbox_uid`` when rlxf runs as
  root; your own uid, with every file read-only, otherwise) and rlimits. If the kernel refuses
  any of it, ``Sandbox`` raises ``SandboxUnavailable`` instead of running weaker.
- ``"auto"``: strict where the kernel allows it, otherwise weak with a logged warning.
- ``"weak"``: rlimits, a scrubbed environment, a temporary working directory and a
  process-tree kill only; the program can reach the network and whatever files your uid can.
  Logged as a warning. Use it only for code you would run unsandboxed anyway.

Budgets are CPU time, not wall time: a correct program gets the same verdict whether the
machine is idle or every core is busy. ``wall_s`` is only a backstop for programs that sleep
or block (stdin is a file that ends, so reading never blocks), and defaults to
``10 * cpu_s + 5``: generous on purpose, so a busy machine never turns a correct program's
verdict into a timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

Isolation = Literal["strict", "auto", "weak"]
TestStatus = Literal[
    "ok",               # exited 0 within its budgets
    "error",            # raised / exited non-zero
    "timeout",          # CPU budget spent
    "wall_timeout",     # wall-clock backstop hit (sleeping or blocked)
    "memory",           # MemoryError: the address-space limit
    "output_limit",     # wrote more than max_file_mb (stdout or a file)
    "killed",           # died of another signal (e.g. SIGSEGV)
    "stray_processes",  # exited 0 but left processes running (they were killed)
    "setup_error",      # the sandbox could not set the process up: not the program's fault
    "skipped",          # not run: fail_fast after an earlier failure
    "sandbox_error",    # the job as a whole failed (server died / budget exceeded)
]
SERVER = Path(__file__).with_name("_server.py")
DEFAULT_PRELOAD = (
    "array", "bisect", "collections", "copy", "dataclasses", "datetime", "decimal", "enum",
    "fractions", "functools", "heapq", "itertools", "json", "math", "operator", "queue", "random",
    "re", "statistics", "string", "typing",
)
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
}
_SYSTEM_BINDS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache",
                 "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd", "/etc/group")


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be set up on this machine (message says what to do)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for each test case of a program (each test runs in its own process)."""

    cpu_s: float = 2.0            # CPU-time budget (user + system); the verdict-defining limit
    wall_s: float | None = None   # wall-clock backstop; None = 10 * cpu_s + 5
    memory_mb: int = 512          # address-space limit (RLIMIT_AS) of each process
    max_processes: int = 16       # processes + threads the program may have at once
    max_open_files: int = 64      # file descriptors
    max_file_mb: int = 16         # largest file, stdout included (RLIMIT_FSIZE)
    tmp_mb: int = 64              # size of the private /tmp (strict mode)
    tmp_inodes: int = 4096        # files in the private /tmp (strict mode)
    max_output_bytes: int = 1 << 20  # stdout kept for comparison; more is marked truncated

    @property
    def wall(self) -> float:
        return self.wall_s if self.wall_s is not None else 10.0 * self.cpu_s + 5.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "wall_s": self.wall}


@dataclass(frozen=True)
class TestCase:
    """One test of a program: feed stdin, run an assertion, or call a function."""

    __test__ = False              # not a pytest test class, despite the name

    kind: Literal["stdio", "assert", "call"]
    stdin: str = ""               # stdio (and any kind): the program's standard input
    source: str = ""              # assert: Python run after the program, in its namespace
    fn_name: str = ""             # call: the function (or Solution method) to call
    args: tuple = ()              # call: positional arguments (JSON values)

    @staticmethod
    def stdio(stdin: str) -> TestCase:
        return TestCase("stdio", stdin=stdin)

    @staticmethod
    def assertion(source: str) -> TestCase:
        return TestCase("assert", source=source)

    @staticmethod
    def call(fn_name: str, args: Sequence[Any]) -> TestCase:
        return TestCase("call", fn_name=fn_name, args=tuple(args))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "stdin": self.stdin, "source": self.source,
                "fn_name": self.fn_name, "args": list(self.args)}


@dataclass
class TestOutcome:
    """What happened when one test case ran."""

    status: TestStatus
    stdout: str = ""              # the program's stdout (first max_output_bytes)
    stderr: str = ""              # the last 4 KiB of stderr
    result: str = ""              # assert: the completion token; call: the JSON return value
    exit_code: int | None = None
    signal: int | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    stdout_truncated: bool = False
    strays: bool = False          # the program left processes behind (they were killed)


@dataclass
class SandboxResult:
    """A program's outcomes, one per test case, in order."""

    tests: list[TestOutcome]
    error: str | None = None      # the job failed as a whole (tests are then sandbox_error)
    wall_s: float = 0.0
    nonce: str = field(default="", repr=False)  # completion token that assert tests print


class _Server:
    """One server process and its pipes; used by one thread at a time."""

    def __init__(self, python: str, init: dict[str, Any]):
        staging = tempfile.mkdtemp(prefix="rlxf-sandbox-root-")
        os.chmod(staging, 0o755)
        self.proc = subprocess.Popen(
            [python, "-I", str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=dict(SANDBOX_ENV), close_fds=True, start_new_session=True,
        )
        try:
            self.send({**init, "staging_dir": staging})
            self.hello = self.recv(timeout=60.0)
        finally:
            try:
                os.rmdir(staging)  # the server mounted over it in its own namespace; ours is empty
            except OSError:
                pass
        if self.hello is None:
            err = self._stderr()
            self.kill()
            raise SandboxUnavailable(f"the sandbox server did not start: {err or 'no answer'}")

    def send(self, msg: dict[str, Any]) -> None:
        body = json.dumps(msg).encode()
        self.proc.stdin.write(struct.pack(">Q", len(body)) + body)
        self.proc.stdin.flush()

    def recv(self, timeout: float) -> dict[str, Any] | None:
        """The next answer, or None if the server died or did not answer within ``timeout``."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        head = self._read(fd, 8, deadline)
        if head is None:
            return None
        body = self._read(fd, struct.unpack(">Q", head)[0], deadline)
        return None if body is None else json.loads(body)

    @staticmethod
    def _read(fd: int, n: int, deadline: float) -> bytes | None:
        chunks, left = [], n
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _stderr(self) -> str:
        try:
            fd = self.proc.stderr.fileno()
            if select.select([fd], [], [], 0.5)[0]:
                return os.read(fd, 1 << 16).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            pass
        return ""

    def kill(self) -> None:
        try:
            self.proc.kill()  # its job's launcher and init die with it (parent-death signals)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the server exits at end of input
            self.proc.wait(timeout=2.0)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _shutdown(servers: list[_Server]) -> None:
    for server in list(servers):
        server.close()
    servers.clear()


def default_binds(python: str = sys.executable) -> list[str]:
    """Host paths visible (read-only) inside a strict sandbox: the system libraries, the
    Python installation running rlxf and its site-packages, so a program can import what is
    installed -- but not the working directory, the script's directory or a home directory."""
    import site  # noqa: PLC0415

    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(python),
                  *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        candidates.append(site.getusersitepackages())
    candidates += [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
    paths = {os.path.realpath(p) for p in candidates if p and os.path.isdir(p)}
    dirs: list[str] = []
    for p in sorted(paths, key=len):  # drop paths inside one already listed
        if p != "/" and not any(p == d or p.startswith(d + "/") for d in dirs):
            dirs.append(p)
    system = [p for p in _SYSTEM_BINDS if os.path.lexists(p)]
    return system + [d for d in dirs if not any(d == s or d.startswith(s + "/") for s in system)]


class Sandbox:
    """A pool of sandbox servers; ``run`` is thread-safe and blocks, ``arun`` awaits.

    Args:
        limits: default per-test limits (``run`` may override them per program).
        concurrency: programs run at once; default the number of CPU cores.
        isolation: ``strict`` (default), ``auto`` or ``weak`` (see the module doc).
        sandbox_uid: uid (and gid) the program runs as when rlxf runs as root; choose one that
            owns no files and runs no processes on the host.
        preload: modules imported once by each server so programs do not pay for them.
        python: interpreter for the servers (default: this one).
    """

    def __init__(self, limits: SandboxLimits | None = None, *, concurrency: int | None = None,
                 isolation: Isolation = "strict", sandbox_uid: int = 61000,
                 preload: Sequence[str] = DEFAULT_PRELOAD, python: str = sys.executable):
        if sys.platform != "linux":
            raise SandboxUnavailable(f"the code sandbox needs Linux (this is {sys.platform})")
        self.limits = limits or SandboxLimits()
        self.concurrency = concurrency or os.cpu_count() or 1
        self.isolation = isolation
        self.python = python
        self._init = {"sandbox_uid": sandbox_uid, "sandbox_gid": sandbox_uid,
                      "preload": list(preload), "env": dict(SANDBOX_ENV)}
        self._mode: str | None = None if isolation != "weak" else "weak"
        self.mechanisms: list[str] = []
        self._servers: list[_Server] = []
        self._idle: queue.SimpleQueue[_Server] = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="rlxf-sandbox")
        self._finalizer = weakref.finalize(self, _shutdown, self._servers)
        self._start_first()

    # -- servers ----------------------------------------------------------------------------

    def _start_first(self) -> None:
        """Start one server now, so an unavailable isolation fails at construction."""
        server = self._spawn()
        self._idle.put(server)

    def _spawn(self) -> _Server:
        with self._lock:
            mode = self._mode or "strict"
            server = _Server(self.python, {**self._init, "mode": mode, "binds": default_binds(self.python)
                                           if mode == "strict" else []})
            if not server.hello.get("ok") and self._mode is None:
                reason = server.hello.get("error", "unknown")
                server.kill()
                if self.isolation == "strict":
                    raise SandboxUnavailable(
                        f"strict sandbox isolation is not available here: {reason}. Namespaces "
                        "(user, mount, PID, network, IPC) are needed; in a container run it with "
                        "CAP_SYS_ADMIN or allow unprivileged user namespaces. To run model code "
                        "with weaker isolation anyway (rlimits only: it can reach the network and "
                        "your files), set the code verifier's `isolation: weak` (or `auto`)."
                    )
                mode = "weak"
                server = _Server(self.python, {**self._init, "mode": mode, "binds": []})
            if not server.hello.get("ok"):
                server.kill()
                raise SandboxUnavailable(f"the sandbox server failed to start: {server.hello.get('error')}")
            if self._mode is None or not self.mechanisms:
                self._mode = mode
                self.mechanisms = list(server.hello["mechanisms"])
                if mode == "weak":
                    log.warning(
                        "code sandbox runs in WEAK isolation (%s): model-written code can reach the "
                        "network and any file your user can; in force: %s",
                        "requested" if self.isolation == "weak" else "strict unavailable",
                        "; ".join(self.mechanisms))
                else:
                    log.info("code sandbox isolation: %s", "; ".join(self.mechanisms))
            self._servers.append(server)
            return server

    @property
    def mode(self) -> str:
        """The isolation actually in force: ``strict`` or ``weak``."""
        return self._mode or "strict"

    def _retire(self, server: _Server) -> None:
        server.kill()
        with self._lock:
            if server in self._servers:
                self._servers.remove(server)

    # -- running ----------------------------------------------------------------------------

    def run(self, code: str, tests: Sequence[TestCase], *, limits: SandboxLimits | None = None,
            fail_fast: bool = False) -> SandboxResult:
        """Run ``code`` once per test case; blocks until done (at most the limits allow)."""
        limits = limits or self.limits
        nonce = uuid.uuid4().hex
        job = {"code": code, "tests": [t.to_json() for t in tests], "limits": limits.to_json(),
               "fail_fast": fail_fast, "nonce": nonce}
        if not tests:
            return SandboxResult([], nonce=nonce)
        budget = len(tests) * limits.wall + 15.0
        start = time.monotonic()
        with self._slots:
            for _ in range(2):  # once more on a fresh server if the idle one had died
                try:
                    server = self._idle.get_nowait()
                except queue.Empty:
                    server = self._spawn()
                try:
                    server.send(job)
                except (OSError, ValueError) as e:  # it died while idle: the job never started
                    self._retire(server)
                    answer = {"error": f"sandbox server pipe failed: {e}"}
                    continue
                answer = server.recv(timeout=budget)
                if answer is None:
                    self._retire(server)
                    answer = {"error": "sandbox server died or did not answer in time; it was killed "
                                       "with the program's whole process tree"}
                else:
                    self._idle.put(server)
                break
        wall = time.monotonic() - start
        if answer.get("error"):
            return SandboxResult([TestOutcome("sandbox_error") for _ in tests], answer["error"], wall, nonce)
        outcomes = [TestOutcome(**_known(t)) for t in answer["tests"]]
        return SandboxResult(outcomes, None, wall, nonce)

    async def arun(self, code: str, tests: Sequence[TestCase], *, limits: SandboxLimits | None = None,
                   fail_fast: bool = False) -> SandboxResult:
        """``run`` without blocking the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(self.run, code, tests, limits=limits,
                                                                  fail_fast=fail_fast))

    def close(self) -> None:
        """Stop every server (their running programs are killed)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _known(outcome: dict[str, Any]) -> dict[str, Any]:
    names = TestOutcome.__dataclass_fields__
    return {k: v for k, v in outcome.items() if k in names}


__all__ = ["Isolation", "Sandbox", "SandboxLimits", "SandboxResult", "SandboxUnavailable", "TestCase",
           "TestOutcome", "default_binds"]

"""Run untrusted Python programs (model-written code) against test cases, in isolation.

    with Sandbox(SandboxLimits(cpu_s=2)) as box:
        result = box.run("print(int(input()) * 2)", [TestCase.stdio("21\\n")])
        result.tests[0].status, result.tests[0].stdout   # ("ok", "42\\n")

Each ``Sandbox`` keeps up to ``concurrency`` long-lived server processes (``_server.py``), one
job at a time each. A server builds a fresh, isolated process tree per program whose runner is
a freshly started interpreter (``_runner.py``): it never held another program's code, tests or
outputs, nor the server's heap. The runner forks one process per test case. The program
only *produces* outputs (stdout, or the JSON of the values its calls return); the caller
compares them with the expected values, which never enter the sandbox (see ``code.py``).

Limits hold for the whole program -- all its processes, the shared memory and memfds they
create, the CPU of processes that already exited -- where the kernel offers control groups
(v2, or v1's memory + pids + cpuacct; ``Sandbox.cgroup`` says which). Without them the
sandbox falls back to per-process rlimits with CPU counted over every reaped process, says so
in ``mechanisms`` and logs a warning.

Isolation (``isolation=``):

- ``"strict"`` (default): network, mount, PID, IPC and user namespaces, a read-only minimal
  root, a private size-limited /tmp, an unprivileged uid (``sandbox_uid`` when rlxf runs as
  root; your own uid, with every file read-only, otherwise), rlimits, and a seccomp filter that
  allows sockets of the families an empty network namespace contains (unix, IPv4, IPv6: not
  vsock, which the namespace does not scope and which reaches the host), no io_uring, no
  ptrace or process_vm_readv/writev, no prlimit on another process (lowering a same-uid
  process's limits needs no privilege), and no new namespaces (unshare, setns, clone with a
  CLONE_NEW* flag; clone3 fails with ENOSYS so libc falls back to clone). If the kernel refuses
  any of it, ``Sandbox`` raises ``SandboxUnavailable`` instead of running weaker.
- ``"auto"``: strict where the kernel allows it, otherwise weak with a logged warning.
- ``"weak"``: no namespaces: the program shares the machine's processes, files and network,
  kept from them by what a process may impose on itself: rlimits, a scrubbed environment, a
  temporary working directory, a process-tree kill and, where the kernel has them, a seccomp
  filter and a Landlock domain. The filter is strict mode's but for sockets: AF_UNIX only, so
  no network (IPv4, IPv6, netlink, vsock...), no io_uring, and no ptrace or prlimit on your
  processes. The Landlock domain (Linux >= 5.13) keeps the program from every process outside
  it (no ptrace, no /proc/<pid>/mem; from ABI 6 no signals or abstract Unix sockets); lets it
  read only what strict mode's root holds (``default_binds``: the Python installation, its
  site-packages, the system libraries), /proc, /dev/shm, the null and random devices and its
  working directory -- not your home, the run directory or a file of expected answers; keeps
  its writes inside that working directory (its $HOME and $TMPDIR), /dev/shm and the null
  devices (a program that writes to /tmp by path fails in weak mode; strict mode gives it a
  private /tmp); and from ABI 4 refuses TCP bind and connect. Open even then: /proc (other
  processes' command lines, not their memory), /dev/shm (keep no secrets there), stat of any
  path (names, sizes), Unix sockets its uid may connect to by path (a Docker socket, an ssh
  agent). Without Landlock the program reads and writes whatever its uid can; without the
  filter it reaches the network (but for TCP, with Landlock ABI >= 4). As root it runs as
  ``sandbox_uid`` with one capability, reading files (CAP_DAC_READ_SEARCH: without Landlock,
  every file of the machine): out of your processes' memory, unable to signal them or write
  root's files, and bounded in its forks by RLIMIT_NPROC (which exempts root). As any other
  user without Landlock it runs as you and can read, through /proc/<pid>/mem, the memory of
  your dumpable processes -- the caller's, where the expected answers are -- wherever ptrace
  between your processes is allowed. ``mechanisms`` says which case holds and what stays open.
  Logged as a warning; the code verifier's metric ``strict_isolation`` is 0. Use it only for
  code you would run unsandboxed anyway.

Budgets are CPU time, not wall time: a correct program gets the same verdict whether the
machine is idle or every core is busy. The verdict is ``timeout`` when the kernel's CPU count
for the test (all its processes) exceeds ``cpu_s * (1 + cpu_margin)``, whatever the program
printed; it is killed 50 ms later. The margin (default 50%) is there because the same work
costs more CPU time on a loaded machine (shared caches and cores, hyperthread siblings, a
hypervisor's other guests): on this project's shared 2-core VM, fixed work planned at 80% of
its budget was counted at up to 136% with every core oversubscribed
(``benchmarks/rewards.py --flips`` measures it). Set ``cpu_s`` to what a reference solution
needs alone; the margin absorbs the load. The count starts after the fresh interpreter has
started, so start-up is not the program's. ``wall_s`` is only a backstop for
programs that sleep or block (stdin is a file that ends, so reading never blocks), and
defaults to ``10 * cpu_s + 5``: generous on purpose, so a busy machine never turns a correct
program's verdict into a timeout. A job's time is counted from when it starts, not while it
waits for a free server, so no program is failed by the programs queued before it.

The servers die with their caller, ``kill -9`` included: each watches its input pipe, and
the job's process tree dies with the server (parent-death signals, the PID namespace, and the
control group, which the server empties on its way out).
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
from collections.abc import Callable, Sequence
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
DEFAULT_PRELOAD: tuple[str, ...] = ()  # each program's fresh runner would pay for every one
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

    cpu_s: float = 2.0            # CPU-time budget (user + system) a correct solution should fit in
    cpu_margin: float = 0.5       # timeout only past cpu_s * (1 + cpu_margin): see the module doc
    wall_s: float | None = None   # wall-clock backstop; None = 10 * cpu_s + 5
    memory_mb: int = 512          # memory of the whole program (cgroup), and each process's address space
    max_processes: int = 16       # processes + threads the program may have at once (all together)
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

    kind: Literal["stdio", "assert", "call", "eval"]
    stdin: str = ""               # stdio (and any kind): the program's standard input
    source: str = ""              # assert: Python run after the program, in its namespace
    fn_name: str = ""             # call: the function (or Solution method) to call
    args: tuple = ()              # call: positional arguments (JSON values)
    exprs: tuple[str, ...] = ()   # eval: expressions whose values (as JSON) the test reports
    setup: str = ""               # eval: statements run after the program, before the expressions

    @staticmethod
    def stdio(stdin: str) -> TestCase:
        return TestCase("stdio", stdin=stdin)

    @staticmethod
    def assertion(source: str) -> TestCase:
        return TestCase("assert", source=source)

    @staticmethod
    def call(fn_name: str, args: Sequence[Any]) -> TestCase:
        return TestCase("call", fn_name=fn_name, args=tuple(args))

    @staticmethod
    def evaluate(exprs: Sequence[str], setup: str = "") -> TestCase:
        """Report the values of ``exprs`` (evaluated after the program and ``setup``, a test's
        imports): the caller compares them, so the program never sees what they are compared with."""
        return TestCase("eval", exprs=tuple(exprs), setup=setup)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "stdin": self.stdin, "source": self.source,
                "fn_name": self.fn_name, "args": list(self.args), "exprs": list(self.exprs), "setup": self.setup}


@dataclass
class TestOutcome:
    """What happened when one test case ran."""

    status: TestStatus
    stdout: str = ""              # the program's stdout (first max_output_bytes)
    stderr: str = ""              # the last 4 KiB of stderr
    result: str = ""              # assert: the completion token, or ASSERTION_FAILED where the test's
                                  # own assertion failed; call: the JSON return value;
                                  # eval: a JSON list of {"value": v} or {"error": message}
    exit_code: int | None = None
    signal: int | None = None
    cpu_s: float = 0.0            # kernel-counted CPU of all the test's processes, exited ones included
    wall_s: float = 0.0
    stdout_truncated: bool = False
    strays: bool = False          # the program left processes behind (they were killed)


@dataclass
class SandboxResult:
    """A program's outcomes, one per test case, in order."""

    tests: list[TestOutcome]
    error: str | None = None      # the job failed as a whole (tests are then sandbox_error)
    wall_s: float = 0.0
    tokens: list[str] = field(default_factory=list, repr=False)  # what each assert test prints on success
    memory_peak_mb: float = 0.0   # the program's peak memory, all processes (0: no control group)


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
        self.cgroup_paths: list[str] = list(self.hello.get("cgroup_paths", []))

    def send(self, msg: dict[str, Any]) -> None:
        body = json.dumps(msg).encode()
        self.proc.stdin.write(struct.pack(">Q", len(body)) + body)
        self.proc.stdin.flush()

    def recv(self, timeout: float, cancel: int | None = None) -> dict[str, Any] | None:
        """The next answer, or None if the server died or did not answer within ``timeout``.
        Once ``cancel`` (a pipe) is readable, the server is asked to kill the job, which it
        answers with an error."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        if cancel is not None:
            while True:
                wait = deadline - time.monotonic()
                ready = select.select([fd, cancel], [], [], max(0.0, wait))[0] if wait > 0 else []
                if not ready:
                    return None
                if fd in ready:
                    break
                self.send({"cancel": True})
                cancel = None
                break
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
        for path in getattr(self, "cgroup_paths", []):  # what a killed server could not empty
            remove_tree(path)

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
    """Host paths visible (read-only) inside a strict sandbox, and the only ones a weak one reads
    where the kernel has Landlock: the system libraries, the Python installation running rlxf
    and its site-packages, so a program can import what is installed -- but not the working
    directory, the script's directory or a home directory."""
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
        sandbox_uid: uid (and gid) the program runs as when rlxf runs as root, in every mode;
            choose one that owns no files and runs no processes on the host.
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
        # the interpreter itself, not a venv's link to it: programs see a private /tmp, so a venv
        # under /tmp (a clone in a temporary directory) would vanish inside; the real one lives
        # in the installation the sandbox binds (sys.base_prefix). The runner needs only stdlib.
        self.python = os.path.realpath(python)
        self._init = {"sandbox_uid": sandbox_uid, "sandbox_gid": sandbox_uid,
                      "preload": list(preload), "env": dict(SANDBOX_ENV),
                      # programs import what is installed where rlxf runs (a venv's packages), not
                      # what the server's interpreter (the venv's base) has; real paths, as bound
                      "site_paths": [os.path.realpath(p) for p in sys.path
                                     if p.rstrip("/").endswith(("site-packages", "dist-packages"))]}
        self._mode: str | None = None if isolation != "weak" else "weak"
        self.mechanisms: list[str] = []
        self.cgroup: str | None = None  # "v2" / "v1": whole-program limits; None: rlimits only
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
            init = {**self._init, "binds": default_binds(self.python)}  # weak mode's Landlock reads them
            server = _Server(self.python, {**init, "mode": mode})
            if not server.hello.get("ok") and self._mode is None:
                reason = server.hello.get("error", "unknown")
                server.kill()
                if self.isolation == "strict":
                    raise SandboxUnavailable(
                        f"strict sandbox isolation is not available here: {reason}. Namespaces "
                        "(user, mount, PID, network, IPC) are needed; in a container run it with "
                        "CAP_SYS_ADMIN or allow unprivileged user namespaces. To run model code "
                        "with weaker isolation anyway (no namespaces: what it can still reach, the "
                        "kernel decides, and Sandbox.mechanisms names), set the code verifier's "
                        "`isolation: weak` (or `auto`)."
                    )
                mode = "weak"
                server = _Server(self.python, {**init, "mode": mode})
            if not server.hello.get("ok"):
                server.kill()
                raise SandboxUnavailable(f"the sandbox server failed to start: {server.hello.get('error')}")
            if self._mode is None or not self.mechanisms:
                self._mode = mode
                self.mechanisms = list(server.hello["mechanisms"])
                self.cgroup = server.hello.get("cgroup")
                if self.cgroup is None:
                    log.warning("code sandbox: no usable control groups, so limits are per process "
                                "(a program's forks, shared memory and memfds can take more than "
                                "memory_mb in all): %s", self.mechanisms[-1])
                if mode == "weak":
                    log.warning(
                        "code sandbox runs in WEAK isolation (%s): no namespaces, so model-written code "
                        "shares this machine's files, processes and network, kept from them only by what "
                        "follows, which names what it leaves open (a policy can learn to use that, e.g. "
                        "to read expected answers): %s",
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
            fail_fast: bool = False, cancel: int | None = None) -> SandboxResult:
        """Run ``code`` once per test case; blocks until done (at most the limits allow).

        ``cancel``: a file descriptor (a pipe's read end); once it is readable, the job is
        killed and the result is a ``sandbox_error`` saying so.
        """
        limits = limits or self.limits
        tokens = [uuid.uuid4().hex for _ in tests]
        job = {"code": code, "tests": [{**t.to_json(), "token": tok} for t, tok in zip(tests, tokens, strict=True)],
               "limits": limits.to_json(), "fail_fast": fail_fast}
        if not tests:
            return SandboxResult([])
        budget = len(tests) * limits.wall + 15.0  # counted from the start of the job, not the queue
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
                answer = server.recv(timeout=budget, cancel=cancel)
                if answer is None:
                    self._retire(server)
                    answer = {"error": "sandbox server died or did not answer in time; it was killed "
                                       "with the program's whole process tree"}
                else:
                    self._idle.put(server)
                break
        wall = time.monotonic() - start
        if answer.get("error"):
            return SandboxResult([TestOutcome("sandbox_error") for _ in tests], answer["error"], wall, tokens)
        outcomes = [TestOutcome(**_known(t)) for t in answer["tests"]]
        return SandboxResult(outcomes, None, wall, tokens, answer.get("memory_peak_mb", 0.0))

    async def arun(self, code: str, tests: Sequence[TestCase], *, limits: SandboxLimits | None = None,
                   fail_fast: bool = False) -> SandboxResult:
        """``run`` without blocking the event loop. Cancelling the awaiting task kills the job
        (an abandoned request must not keep a server busy)."""
        loop = asyncio.get_running_loop()
        cancel_r, cancel_w = os.pipe()
        future = loop.run_in_executor(self._executor, partial(self.run, code, tests, limits=limits,
                                                              fail_fast=fail_fast, cancel=cancel_r))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            os.write(cancel_w, b"x")
            raise
        finally:
            future.add_done_callback(_closer(cancel_r, cancel_w))

    def close(self) -> None:
        """Stop every server (their running programs are killed)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def remove_tree(path: str) -> None:
    """Remove a dead server's control groups (``_cgroup.py``): kill what is left in them,
    remove them bottom-up. Here, not there: this package must load without its siblings."""
    if not os.path.isdir(path):
        return
    for root, dirs, _ in os.walk(path, topdown=False):
        for d in dirs:
            _kill_and_rmdir(os.path.join(root, d))
    _kill_and_rmdir(path)


def _kill_and_rmdir(path: str) -> None:
    for _ in range(500):
        try:
            with open(path + "/cgroup.procs") as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.002)


def _closer(*fds: int) -> Callable[[Any], None]:
    def close(_: Any) -> None:
        for fd in fds:
            os.close(fd)
    return close


def _known(outcome: dict[str, Any]) -> dict[str, Any]:
    names = TestOutcome.__dataclass_fields__
    return {k: v for k, v in outcome.items() if k in names}


__all__ = ["Isolation", "Sandbox", "SandboxLimits", "SandboxResult", "SandboxUnavailable", "TestCase",
           "TestOutcome", "default_binds"]

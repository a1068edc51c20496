"""The sandbox server: runs untrusted Python programs in isolation. Standard library only.

``rlxf.rewards.sandbox.Sandbox`` starts one server per concurrency slot as
``python -I _server.py`` with a scrubbed environment, and speaks length-prefixed JSON with it
over stdin/stdout (8-byte big-endian length, then UTF-8 JSON). The first message configures
the server; it answers with the isolation it achieved (or why it could not). Then each message
is a job (one program and its test cases) and each answer the job's per-test outcomes.

Process layout in ``strict`` mode (every box is a process, the arrows are forks)::

    server  (new mount + network namespace; root filesystem = a read-only tmpfs holding only
     │       the Python installation, /usr and a few /etc files; no network interfaces up)
     └─ launcher  (per job: new mount, PID and IPC namespaces)
         └─ init  (PID 1 of the job: mounts a private size-limited /tmp and a fresh /proc)
             └─ test process  (per test case: rlimits, unprivileged uid, its own user
                               namespace, no capabilities; runs the program in a forked
                               interpreter -- no interpreter start-up per program)

The kernel kills every process of a PID namespace when its init exits, so a timeout, a crash
or a dead server takes the whole tree with it; the private /tmp and IPC objects disappear with
their namespaces. ``weak`` mode (opt-in, for machines without namespaces) keeps the rlimits,
the scrubbed environment, a temporary working directory and process-tree cleanup through a
child subreaper, and nothing else: the program can reach the network and the caller's files.

Keep this file importable by a bare interpreter: the standard library only, no rlxf imports.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import platform
import resource
import select
import signal
import struct
import sys
import tempfile
import time
import traceback

# --- Linux constants (include/uapi/linux/sched.h, mount.h, prctl.h) -------------------------
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME = 32, 1024, 2048
MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 4096, 16384, 1 << 18, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 217, "arm64": 217, "ppc64le": 203, "s390x": 217}
# statvfs f_flag bit -> mount flag, to keep a mount's locked flags when remounting it read-only
ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME,
            2048: MS_NODIRATIME, 4096: MS_RELATIME}

SETUP_FAILED = 125  # exit code of a test process that could not be set up (not the program's fault)
_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int, what: str) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({what})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_enc(source), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data)),
           f"mount({source!r} on {target!r}, type {fstype!r})")


def _enc(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


# --- framing ---------------------------------------------------------------------------------

def recv(fd: int) -> dict | None:
    head = _read_exact(fd, 8)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack(">Q", head)[0])
    return None if body is None else json.loads(body)


def send(fd: int, msg: dict) -> None:
    body = json.dumps(msg).encode()
    data = struct.pack(">Q", len(body)) + body
    while data:
        data = data[os.write(fd, data):]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- server set-up ---------------------------------------------------------------------------

def setup_strict(init: dict) -> list[str]:
    """Enter a private mount + network namespace and pivot into a minimal read-only root.

    Returns the isolation mechanisms now in force. Raises OSError naming the step that the
    kernel refused.
    """
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    if root:
        unshare(CLONE_NEWNS | CLONE_NEWNET, "mount+net")
    else:  # an unprivileged user gets the same namespaces through a user namespace of its own
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET, "user+mount+net")
        _write_id_maps(uid, gid)
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back to the host
    new_root = init["staging_dir"]
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path in init["binds"]:
        _bind_into(new_root, path)
    for sub in ("tmp", "proc", "dev"):
        os.makedirs(new_root + "/" + sub, exist_ok=True)
    if not root:
        # Inside a user namespace the kernel mounts a new procfs only if one is already fully
        # visible in the mount namespace. Keep the host's there; every job mounts its own on
        # top and aborts if it cannot, so a program never sees this one.
        mount("/proc", new_root + "/proc", None, MS_BIND | MS_REC)
    for dev in ("null", "zero", "full", "random", "urandom"):
        target = f"{new_root}/dev/{dev}"
        open(target, "w").close()
        mount(f"/dev/{dev}", target, None, MS_BIND)
    for name, link in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                       ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"), ("shm", "/tmp")):
        os.symlink(link, f"{new_root}/dev/{name}")
    # the root itself becomes read-only: the program can only write to its private /tmp
    mount(None, new_root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    os.chdir(new_root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(38, f"pivot_root: syscall number unknown for {platform.machine()} (known: "
                          f"{', '.join(SYS_PIVOT_ROOT)})")
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount2(old root)")  # the host tree is gone
    os.chdir("/")
    prctl(PR_SET_DUMPABLE, 0)  # a program running as the same uid cannot ptrace us
    who = f"uid {init['sandbox_uid']}" if root else f"your uid {uid} (read-only files)"
    return ["network namespace (no interfaces)", "mount namespace: read-only minimal root",
            "PID namespace per job (tree killed with its init)", "IPC namespace per job",
            "private size-limited /tmp per job", f"user namespace per test, {who}, no capabilities",
            "rlimits: cpu, address space, processes, open files, file size"]


def _write_id_maps(uid: int, gid: int) -> None:
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def _bind_into(new_root: str, path: str) -> None:
    """Make ``path`` of the host visible, read-only, at the same place under ``new_root``."""
    target = new_root + path
    if os.path.islink(path):  # merged-/usr systems: /bin -> usr/bin
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(path, target, None, MS_BIND)
    locked = 0
    flags = os.statvfs(path).f_flag
    for st, ms in ST_TO_MS.items():
        if flags & st:
            locked |= ms
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | locked)


# --- one job ---------------------------------------------------------------------------------

def run_job(job: dict, init: dict) -> dict:
    """Fork a launcher for ``job`` and wait for its answer, at most the job's deadline."""
    limits = job["limits"]
    deadline = time.monotonic() + len(job["tests"]) * limits["wall_s"] + 2.0
    r, w = os.pipe()
    log_fd = _memfd("launcher-stderr")  # the launcher's and init's own errors, for the answer
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # launcher
        code = 1
        try:
            os.close(r)
            os.dup2(log_fd, 2)
            code = _launcher(job, init, w, server_pid)
        except BaseException:  # noqa: BLE001 - report, never return into the server loop
            traceback.print_exc()
        os._exit(code)
    os.close(w)
    data, err = _read_until(r, pid, deadline)
    os.close(r)
    if err:
        _kill_and_reap(pid)
        os.close(log_fd)
        return {"error": err}
    _, status = os.waitpid(pid, 0)
    size = os.fstat(log_fd).st_size
    log = os.pread(log_fd, 2000, max(0, size - 2000)).decode("utf-8", "replace").strip()
    os.close(log_fd)
    if not data:
        return {"error": f"sandbox launcher exited with status {os.waitstatus_to_exitcode(status)} and no "
                         f"result: {log or 'no message'}"}
    return json.loads(data)


def _read_until(fd: int, pid: int, deadline: float) -> tuple[bytes, str | None]:
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"", "job wall-time budget exceeded; the whole process tree was killed"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks), None
            chunks.append(chunk)


def _kill_and_reap(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _launcher(job: dict, init: dict, result_fd: int, server_pid: int) -> int:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:  # the server died before we set the death signal
        return 1
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)  # the protocol pipes are the server's, not ours
    os.dup2(devnull, 1)
    os.close(devnull)
    if init["mode"] == "weak":
        return _init_process(job, init, result_fd)
    unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC, "mount+pid+ipc")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            # getppid() is 0 here (our parent is outside the namespace), so unlike the launcher
            # we cannot check for a parent that died before this line; its jobs are bounded
            # by their own limits anyway
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            code = _init_process(job, init, result_fd)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        os._exit(code)
    os.close(result_fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) & 0xFF


def _init_process(job: dict, init: dict, result_fd: int) -> int:
    """PID 1 of the job (strict) or the job's subreaper (weak): run each test, report."""
    limits = job["limits"]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)  # init ignores signals it has no handler for
    strict = init["mode"] == "strict"
    if strict:
        ident = init["sandbox_uid"] if os.geteuid() == 0 else os.getuid()
        size = f"size={limits['tmp_mb']}m,nr_inodes={limits['tmp_inodes']}"
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
              f"mode=0700,uid={ident},gid={init['sandbox_gid'] if os.geteuid() == 0 else os.getgid()},{size}")
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        workdir = "/tmp"
    else:
        prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the program come back to us
        workdir = tempfile.mkdtemp(prefix="rlxf-sandbox-")
    outcomes = []
    try:
        for i, test in enumerate(job["tests"]):
            if job.get("fail_fast") and outcomes and outcomes[-1]["status"] != "ok":
                outcomes.extend({"status": "skipped"} for _ in job["tests"][i:])
                break
            outcomes.append(_run_test(job, test, init, workdir))
    finally:
        if not strict:
            _rmtree(workdir)
    payload = json.dumps({"tests": outcomes}).encode()
    while payload:
        payload = payload[os.write(result_fd, payload):]
    os.close(result_fd)
    return 0


def _rmtree(path: str) -> None:
    import shutil  # noqa: PLC0415 - weak mode only

    shutil.rmtree(path, ignore_errors=True)


def _memfd(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    if data:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _run_test(job: dict, test: dict, init: dict, workdir: str) -> dict:
    limits = job["limits"]
    fds = [_memfd("stdin", test.get("stdin", "").encode()), _memfd("stdout"), _memfd("stderr"),
           _memfd("result")]
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _test_process(job, test, init, workdir, fds)  # never returns
    exited = _wait_exit(pid, limits["wall_s"])
    if not exited:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - start
    strays = _kill_strays(init["mode"] == "strict", pid)
    cpu = usage.ru_utime + usage.ru_stime
    cap = limits["max_output_bytes"]
    stdout = os.pread(fds[1], cap + 1, 0)
    stderr_size = os.fstat(fds[2]).st_size
    stderr = os.pread(fds[2], 4096, max(0, stderr_size - 4096))
    result = os.pread(fds[3], cap + 1, 0)
    for fd in fds:
        os.close(fd)
    out = {
        "status": _classify(exited, status, cpu, limits["cpu_s"], stderr, strays),
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "cpu_s": round(cpu, 4), "wall_s": round(wall, 4),
        "stdout": stdout[:cap].decode("utf-8", "replace"), "stdout_truncated": len(stdout) > cap,
        "stderr": stderr.decode("utf-8", "replace"), "result": result[:cap].decode("utf-8", "replace"),
        "strays": strays,
    }
    return out


def _wait_exit(pid: int, timeout: float) -> bool:
    """True if ``pid`` exited within ``timeout`` seconds (it stays unreaped)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3: poll
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            time.sleep(0.002)
        return False
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(pidfd)


def _kill_strays(strict: bool, pid: int) -> bool:
    """Kill whatever the program left running; True if there was anything."""
    found = False
    _reap_zombies()  # exited orphans are not strays
    if strict:  # we are PID 1: kill(-1) reaches every other process of the namespace
        while True:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                break
            found = True
            _reap_all()
        return found
    while True:  # weak: the program's process group, then any orphan reparented to us
        killed = False
        try:
            os.killpg(pid, signal.SIGKILL)
            killed = True
        except (ProcessLookupError, PermissionError):
            pass
        for child in _children():
            try:
                os.kill(child, signal.SIGKILL)
                killed = True
            except ProcessLookupError:
                pass
        if not killed:
            return found
        found = True
        _reap_all()


def _children() -> list[int]:
    kids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                kids.extend(int(p) for p in f.read().split())
        except OSError:
            pass
    return kids


def _reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _reap_all() -> None:
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if not _children():
                return
            time.sleep(0.001)


def _classify(exited: bool, status: int, cpu: float, cpu_limit: float, stderr: bytes, strays: bool) -> str:
    if not exited:
        return "wall_timeout"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= math.floor(cpu_limit)):
            return "timeout"
        if sig == signal.SIGXFSZ:
            return "output_limit"
        return "killed"
    code = os.WEXITSTATUS(status)
    if code == SETUP_FAILED:
        return "setup_error"
    if cpu > cpu_limit:
        return "timeout"
    if code != 0:
        tail = stderr[-400:]
        if b"MemoryError" in tail:
            return "memory"
        # Python ignores SIGXFSZ, so the file-size limit surfaces as an EFBIG error
        return "output_limit" if b"[Errno 27] File too large" in tail else "error"
    return "stray_processes" if strays else "ok"


# --- the test process ------------------------------------------------------------------------

def _test_process(job: dict, test: dict, init: dict, workdir: str, fds: list[int]) -> None:
    try:
        _enter_sandbox(job["limits"], init, workdir, fds)
    except BaseException:  # noqa: BLE001
        try:
            os.write(2, traceback.format_exc().encode())
        finally:
            os._exit(SETUP_FAILED)
    _execute(job["code"], test, job.get("nonce", ""))


def _enter_sandbox(limits: dict, init: dict, workdir: str, fds: list[int]) -> None:
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target, inheritable=True)
    os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    strict = init["mode"] == "strict"
    mb = 1 << 20
    cpu = max(1, math.ceil(limits["cpu_s"]))
    for res, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)),
                       (resource.RLIMIT_AS, (limits["memory_mb"] * mb,) * 2),
                       (resource.RLIMIT_FSIZE, (limits["max_file_mb"] * mb,) * 2),
                       (resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2),
                       (resource.RLIMIT_CORE, (0, 0)),
                       (resource.RLIMIT_MEMLOCK, (0, 0)),
                       (resource.RLIMIT_MSGQUEUE, (0, 0))):
        resource.setrlimit(res, value)
    if strict:
        if os.geteuid() == 0:  # drop root for good: no capabilities survive a uid change
            uid, gid = init["sandbox_uid"], init["sandbox_gid"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        prctl(PR_SET_DUMPABLE, 1)  # inherited off (or cleared by setresuid); needed for our id maps
        # A user namespace of our own: the process-count limit below is then counted for this
        # test alone (per-namespace ucounts, Linux >= 5.14), not across concurrent sandboxes
        # sharing the uid; and its capabilities there own nothing (mounts, network, PIDs
        # belong to the parent namespace).
        uid, gid = os.getuid(), os.getgid()
        unshare(CLONE_NEWUSER, "user")
        _write_id_maps(uid, gid)
    nproc = limits["max_processes"]
    if not strict and os.geteuid() != 0:  # counted across all of this user's processes
        nproc += _processes_of(os.getuid())
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(init["env"])
    os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _processes_of(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return count


def _execute(code: str, test: dict, nonce: str) -> None:
    """Run the program (and the test's own code) in a fresh ``__main__``; exit with its status."""
    import builtins  # noqa: PLC0415
    import io  # noqa: PLC0415
    import types  # noqa: PLC0415

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding="utf-8", errors="replace")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16), encoding="utf-8", errors="replace")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                                   errors="replace", write_through=True)
    sys.argv = ["solution.py"]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    main.__dict__["__file__"] = "solution.py"
    sys.modules["__main__"] = main
    status = 0
    try:
        exec(compile(code, "solution.py", "exec"), main.__dict__)  # noqa: S102 - the sandbox's job
        kind = test["kind"]
        if kind == "assert":
            exec(compile(test["source"], "test.py", "exec"), main.__dict__)  # noqa: S102
            _emit(nonce)
        elif kind == "call":
            _emit(json.dumps(_call(main.__dict__, test["fn_name"], test["args"])))
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the program's failure is its verdict
        status = 1
        try:  # the program's frames only, not this harness's
            kind, value, tb = sys.exc_info()
            traceback.print_exception(kind, value, tb.tb_next if tb is not None else None)
        except BaseException:  # noqa: BLE001
            pass
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        status = status or 1
    os._exit(status & 0xFF)


def _call(namespace: dict, fn_name: str, args: list):
    fn = namespace.get(fn_name)
    if fn is None and isinstance(namespace.get("Solution"), type):  # LeetCode style
        fn = getattr(namespace["Solution"](), fn_name, None)
    if fn is None:
        raise NameError(f"the program defines no function {fn_name!r}")
    return _plain(fn(*args))


def _plain(value):
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _emit(text: str) -> None:
    data = text.encode()
    while data:
        data = data[os.write(3, data):]


# --- main loop -------------------------------------------------------------------------------

def main() -> int:
    init = recv(0)
    if init is None:
        return 0
    for name in init.get("preload", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module is the program's problem
            pass
    try:
        mechanisms = setup_strict(init) if init["mode"] == "strict" else [
            "rlimits: cpu, address space, open files, file size",
            "process-count limit" if os.geteuid() != 0 else
            "NO process-count limit (root is exempt from RLIMIT_NPROC: a fork bomb is not bounded)",
            "scrubbed environment", "temporary working directory", "process-tree kill (subreaper)"]
    except Exception as e:  # noqa: BLE001 - the host decides: refuse, or fall back if allowed
        send(1, {"ok": False, "error": f"{type(e).__name__}: {e}" if not isinstance(e, OSError) else str(e)})
        return 0
    send(1, {"ok": True, "mechanisms": mechanisms, "pid": os.getpid()})
    while True:
        job = recv(0)
        if job is None:
            return 0
        try:
            answer = run_job(job, init)
        except Exception as e:  # noqa: BLE001 - one bad job must not take the server down
            answer = {"error": f"sandbox server error: {type(e).__name__}: {e}"}
        send(1, answer)


if __name__ == "__main__":
    sys.exit(main())

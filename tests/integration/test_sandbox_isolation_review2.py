"""What a program could still reach from inside the sandbox, in both isolation modes.

- strict: a program could create namespaces of its own (``unshare(CLONE_NEWUSER)``, then
  mount, network... namespaces where it is root), which widens the kernel code it can attack.
- weak: the program could ptrace, ``process_vm_readv`` and create namespaces freely; as a
  non-root user it could read the caller's memory (the expected answers) through
  ``/proc/<pid>/mem``, which a seccomp filter cannot tell from other files: a Landlock domain
  (Linux >= 5.13, unprivileged) keeps it from every process outside the program. And its
  process limit counted the caller's processes, not their threads (which RLIMIT_NPROC counts),
  so under a threaded caller every program failed to fork.
"""

from __future__ import annotations

import ast
import json
import os
import platform
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rlxf.rewards.sandbox as sandbox_package
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, TestCase
from rlxf.rewards.sandbox._server import SECCOMP_ARCH, landlock_abi, seccomp_filter

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
LIMITS = SandboxLimits(cpu_s=2, wall_s=20, memory_mb=256)
ALLOW, EPERM, ENOSYS, EAFNOSUPPORT = 0x7FFF0000, 0x00050001, 0x00050026, 0x00050061
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWTIME, SIGCHLD = 0x10000000, 0x20000, 0x40000000, 0x80, 17
THREAD_FLAGS = 0x3D0F00  # what glibc passes to clone for a thread (VM, FS, FILES, SIGHAND, THREAD, ...)


def run_bpf(prog: list[tuple[int, int, int, int]], arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Classic BPF as the kernel runs a seccomp filter (the opcodes the sandbox uses)."""
    data = struct.pack("=iI8x6Q", nr, arch, *(list(args) + [0] * (6 - len(args))))
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x06:
            return k
        if code == 0x20:
            acc, pc = struct.unpack_from("=I", data, k)[0], pc + 1
            continue
        taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
        pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64", "ppc64le", "s390x"])
def test_the_filter_refuses_namespaces_and_tracing_and_lets_threads_through(machine):
    arch, nr, _ = SECCOMP_ARCH[machine]
    strict, weak = seccomp_filter(machine, sockets=True), seccomp_filter(machine, sockets=False)
    clone = (lambda flags: (0, flags)) if machine == "s390x" else (lambda flags: (flags, 0))  # s390: stack first
    for prog in (strict, weak):
        assert run_bpf(prog, arch, nr["unshare"], (CLONE_NEWUSER,)) == EPERM
        assert run_bpf(prog, arch, nr["unshare"], (CLONE_NEWTIME,)) == EPERM
        assert run_bpf(prog, arch, nr["unshare"], (0x400,)) == ALLOW  # CLONE_FILES: no namespace
        assert run_bpf(prog, arch, nr["clone"], clone(CLONE_NEWUSER | SIGCHLD)) == EPERM
        assert run_bpf(prog, arch, nr["clone"], clone(CLONE_NEWNET | CLONE_NEWNS | SIGCHLD)) == EPERM
        assert run_bpf(prog, arch, nr["clone"], clone(THREAD_FLAGS)) == ALLOW
        assert run_bpf(prog, arch, nr["clone"], clone(0x8000 | SIGCHLD)) == ALLOW  # the runner's CLONE_PARENT
        assert run_bpf(prog, arch, 435, (0,)) == ENOSYS  # clone3: libc falls back to clone
        for name in ("ptrace", "process_vm_readv", "process_vm_writev", "setns"):
            assert run_bpf(prog, arch, nr[name]) == EPERM, name
        assert run_bpf(prog, arch, 438) == EPERM  # pidfd_getfd
        assert run_bpf(prog, 0x40000003, nr["ptrace"]) == ENOSYS  # another ABI (i386)
        assert run_bpf(prog, arch, nr["socket"], (1,)) == ALLOW
    # sockets: strict allows the families of its empty network namespace, weak (the host's network) unix only;
    # io_uring is refused in both (it makes sockets without socket(2))
    assert (run_bpf(strict, arch, nr["socket"], (2,)), run_bpf(weak, arch, nr["socket"], (2,))) == (ALLOW, EAFNOSUPPORT)
    assert run_bpf(strict, arch, nr["socket"], (40,)) == run_bpf(weak, arch, nr["socket"], (40,)) == EAFNOSUPPORT
    assert run_bpf(strict, arch, 425) == run_bpf(weak, arch, 425) == ENOSYS


HOSTILE = textwrap.dedent("""
    import ctypes, errno, os, signal, struct, time
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE = {"x86_64": 56, "aarch64": 220}
    def err(ret):
        return "ok" if ret >= 0 else errno.errorcode[ctypes.get_errno()]
    def clone(flags):  # fork-like: the child exits at once
        pid = libc.syscall(CLONE[os.uname().machine], flags | 17, 0, 0, 0, 0)
        if pid == 0:
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
        return err(pid)
    def clone3(flags):
        args = ctypes.create_string_buffer(struct.pack("8Q", flags, 0, 0, 0, 17, 0, 0, 0), 64)
        pid = libc.syscall(435, args, 64)
        if pid == 0:
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
        return err(pid)
    print("unshare_user", err(libc.unshare(0x10000000)))
    print("unshare_mount_net", err(libc.unshare(0x40020000)))
    print("clone_user", clone(0x10000000))
    print("clone3_user", clone3(0x10000000))
    print("setns", err(libc.setns(os.open("/proc/self/ns/uts", os.O_RDONLY), 0)))
    child = os.fork()  # a process the program may trace by every kernel rule: its own child
    if child == 0:
        time.sleep(30)
        os._exit(0)
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    buf, value = ctypes.create_string_buffer(8), ctypes.c_uint64(42)
    local, remote = iovec(ctypes.addressof(buf), 8), iovec(ctypes.addressof(value), 8)
    print("process_vm_readv", err(libc.process_vm_readv(child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)))
    print("ptrace", err(libc.ptrace(16, child, 0, 0)))  # PTRACE_ATTACH
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
""")
REFUSED = {"unshare_user": "EPERM", "unshare_mount_net": "EPERM", "clone_user": "EPERM", "clone3_user": "ENOSYS",
           "setns": "EPERM", "process_vm_readv": "EPERM", "ptrace": "EPERM"}
# an ordinary program's threads, processes and pools still work under the filter
ORDINARY = textwrap.dedent("""
    import multiprocessing, os, subprocess, sys, threading
    from concurrent.futures import ThreadPoolExecutor
    out = []
    t = threading.Thread(target=lambda: out.append(1))
    t.start()
    t.join()
    with ThreadPoolExecutor(3) as ex:
        out += list(ex.map(lambda x: 2 * x, [1, 2]))
    out.append(subprocess.run([sys.executable, "-c", "print(5)"], capture_output=True, text=True).stdout.strip())
    def square(x):
        return x * x
    if __name__ == "__main__":
        with multiprocessing.get_context("fork").Pool(2) as pool:
            out += pool.map(square, [3, 4])
    print(out)
""")


@pytest.fixture(scope="module", params=["strict", "weak"])
def box(request):
    with open("/proc/self/status") as f:
        if "Seccomp:" not in f.read():
            pytest.skip("this kernel has no seccomp")
    try:
        box = Sandbox(LIMITS, concurrency=1, isolation=request.param)
    except SandboxUnavailable as e:
        pytest.skip(f"{request.param} sandbox isolation unavailable here: {e}")
    yield box
    box.close()


def test_programs_cannot_create_namespaces_trace_or_read_other_processes(box):
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the hostile program knows clone's number on x86_64 and aarch64 only")
    out = box.run(HOSTILE, [TestCase.stdio("")]).tests[0]
    assert out.status == "ok", out.stderr
    assert dict(line.split() for line in out.stdout.splitlines()) == REFUSED
    assert any("no ptrace" in m and "no new namespaces" in m for m in box.mechanisms)


def test_ordinary_threads_and_processes_still_work_under_the_filter(box):
    out = box.run(ORDINARY, [TestCase.stdio("")]).tests[0]
    assert (out.status, out.stdout) == ("ok", "[1, 2, 4, '5', 9, 16]\n"), out.stderr


# Run by the caller's uid (another user's when the tests run as root): the caller holds the
# secret, as a trainer holds the expected answers; the weak program walks up to it.
CALLER = textwrap.dedent("""
    import importlib.util, json, sys, threading
    here = sys.argv[1]
    spec = importlib.util.spec_from_file_location("sandbox", here + "/__init__.py", submodule_search_locations=[here])
    sandbox = importlib.util.module_from_spec(spec)
    sys.modules["sandbox"] = sandbox
    spec.loader.exec_module(sandbox)
    stop = threading.Event()
    for _ in range(40):  # a trainer's threads: RLIMIT_NPROC counts them with the program's processes
        threading.Thread(target=stop.wait, daemon=True).start()
    program = '''
    import os
    kids = []
    for _ in range(4):
        kids.append(os.fork())
        if kids[-1] == 0:
            os._exit(0)
    for kid in kids:
        os.waitpid(kid, 0)
    pid, reached = os.getpid(), {"forked": len(kids)}
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        try:
            open(f"/proc/{pid}/mem", "rb").close()   # ptrace-checked: open means readable
            reached.setdefault("mem", []).append(pid)
        except OSError:
            pass
        try:
            os.kill(pid, 0)
            reached.setdefault("signal", []).append(pid)
        except OSError:
            pass
    print(reached)
    '''
    with sandbox.Sandbox(sandbox.SandboxLimits(cpu_s=2, wall_s=20), concurrency=1, isolation="weak") as box:
        out = box.run(program, [sandbox.TestCase.stdio("")]).tests[0]
        print(json.dumps({"status": out.status, "stdout": out.stdout, "stderr": out.stderr,
                          "mechanisms": box.mechanisms}))
""")


def test_weak_mode_as_another_user_keeps_the_program_out_of_the_callers_memory():
    package = Path(sandbox_package.__file__).parent
    python, user = os.path.realpath(sys.executable), {}
    if os.geteuid() == 0:  # the case under test is a non-root caller: become one
        user = {"user": 65534, "group": 65534, "extra_groups": []}
        usable = [p for p in (python, "/usr/bin/python3") if _runs_as(user, p, "-c", f"import os; os.listdir({str(package)!r})")]
        if not usable:
            pytest.skip("no interpreter and checkout that uid 65534 can read")
        python = usable[0]
    done = subprocess.run([python, "-I", "-c", CALLER, str(package)], capture_output=True, text=True, timeout=60,
                          cwd="/", env={"PATH": "/usr/bin:/bin"}, **user)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["status"] == "ok", result["stderr"]
    reached = ast.literal_eval(result["stdout"])
    assert reached.pop("forked") == 4  # the caller's own threads do not eat the program's processes
    if landlock_abi() == 0:  # the kernel has no way to close it: the mechanisms must say so
        assert any("NO Landlock" in m and "/proc/<pid>/mem" in m for m in result["mechanisms"])
        return
    assert "mem" not in reached, (reached, result["mechanisms"])
    if landlock_abi() >= 6:
        assert "signal" not in reached, reached
    assert any("a Landlock domain keeps its writes in its working directory and it from" in m
               for m in result["mechanisms"])


def _runs_as(user: dict, *command: str) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=30, **user).returncode == 0
    except OSError:  # not executable by that user
        return False

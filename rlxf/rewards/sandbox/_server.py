"""The sandbox server: runs untrusted Python programs in isolation. Standard library only.

``rlxf.rewards.sandbox.Sandbox`` starts one server per concurrency slot as
``python -I _server.py`` with a scrubbed environment, and speaks length-prefixed JSON with it
over stdin/stdout (8-byte big-endian length, then UTF-8 JSON). The first message configures
the server; it answers with the isolation it achieved (or why it could not). Then each message
is a job (one program and its test cases) and each answer the job's per-test outcomes.

Process layout in ``strict`` mode (every box is a process, the arrows are forks)::

    server  (new mount + network namespace; root filesystem = a read-only tmpfs holding only
     │       the Python installation, /usr and a few /etc files; no network interfaces up;
     │       the base control groups, opened before the root changed)
     └─ launcher  (per job: new mount, PID and IPC namespaces)
         └─ init  (PID 1 of the job: mounts a private size-limited /tmp and a fresh /proc,
             │     creates the program's control group, waits for every test process and
             │     decides each verdict from the kernel's accounting)
             ├─ runner  (per program, in its control group: unprivileged uid, its own user
             │           namespace, rlimits, a seccomp filter, then exec of a fresh
             │           interpreter -- _runner.py)
             └─ test process  (per test case: forked by the runner with CLONE_PARENT, so it
                               is init's child; runs the program, reports its outputs)

The server's heap (and so the init's, a fork of it) may still hold earlier jobs' messages, but
a program can reach neither (another uid, not dumpable), and the processes it runs in descend
from the runner's exec, a fresh address space: a program never finds an earlier job's code,
tests or outputs in its memory. The expected values never reach the server (the caller compares).

The kernel kills every process of a PID namespace when its init exits, so a timeout, a crash
or a dead server takes the whole tree with it; the private /tmp and IPC objects disappear with
their namespaces, the control group is emptied and removed by the server. The server exits
when its input pipe closes, even in the middle of a job (the host died: ``kill -9`` included),
and a message during a job cancels it. ``weak`` mode (opt-in, for machines without namespaces)
keeps the rlimits, the control groups where available, the scrubbed environment, a temporary
working directory and process-tree cleanup through a child subreaper, adds what an unprivileged
process may impose on itself where the kernel has it (the seccomp filter with Unix sockets only,
a Landlock domain that keeps the program from the caller's processes, its reads to the Python
installation and its working directory, its writes to that directory, and it from TCP), and
nothing else: without them the program can reach the network and the caller's files.

Keep this file importable by a bare interpreter: the standard library only, no rlxf imports.
"""

from __future__ import annotations

import ctypes
import json
import marshal
import math
import os
import platform
import resource
import select
import signal
import socket
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
PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, CAP_SETPCAP, CAPABILITY_VERSION_3 = 24, 2, 8, 0x20080522
PR_SET_KEEPCAPS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETGID, CAP_SETUID = 8, 47, 2, 6, 7
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 217, "arm64": 217, "ppc64le": 203, "s390x": 217}
# A network namespace does not scope every socket family: AF_VSOCK shares one port space with
# the host (the hypervisor and every vsock service of the machine are reachable from inside it).
# A seccomp filter lets a strict program create sockets of the families below only (others fail
# with EAFNOSUPPORT, as on a kernel without them); a weak one, which shares the host's network,
# AF_UNIX only: a program under test needs no network, and one that reached it could fetch the
# answers or hand its output to a helper. Both refuse io_uring (IORING_OP_SOCKET makes sockets
# without socket(2)). In every mode it refuses what reaches other processes' memory
# (ptrace, process_vm_readv/writev, pidfd_getfd: EPERM) and new namespaces (unshare or clone with
# a CLONE_NEW* flag, setns: EPERM), which would undo the isolation's assumptions and open the
# kernel's namespace code; clone3 passes its flags in memory a filter cannot read, so it fails
# with ENOSYS and libc falls back to clone, whose flags are checked. prlimit64 works on the
# caller only (pid 0, as setrlimit uses it): on another pid it is EPERM, as lowering the limits
# of any process of the same uid needs no privilege -- a weak-mode program set RLIMIT_NPROC to 0
# on every process of the host's root, a strict one on its own test runner (RLIMIT_CPU would
# kill the caller). Syscalls of another ABI (i386 on x86_64, x32) are refused, or they would
# bypass all of it.
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}
CLONE_NEW_FLAGS = 0x7E020000  # NS, CGROUP, UTS, IPC, USER, PID, NET (clone's low byte is its exit signal)
CLONE_NEWTIME = 0x80          # unshare only
# machine -> AUDIT_ARCH_*, syscall numbers, the argument holding clone's flags (s390's clone
# takes the stack first). io_uring_setup (425), clone3 (435) and pidfd_getfd (438) are the same
# everywhere; socketcall (ppc64le, s390x) is refused as it hides the socket family.
SECCOMP_ARCH = {
    "x86_64": (0xC000003E, {"socket": 41, "socketpair": 53, "clone": 56, "ptrace": 101, "unshare": 272,
                            "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "prlimit64": 302}, 0),
    "aarch64": (0xC00000B7, {"socket": 198, "socketpair": 199, "clone": 220, "ptrace": 117, "unshare": 97,
                             "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271, "prlimit64": 261}, 0),
    "ppc64le": (0xC0000015, {"socket": 326, "socketpair": 333, "clone": 120, "ptrace": 26, "unshare": 282,
                             "setns": 350, "process_vm_readv": 351, "process_vm_writev": 352, "prlimit64": 325,
                             "socketcall": 102}, 0),
    "s390x": (0x80000016, {"socket": 359, "socketpair": 360, "clone": 120, "ptrace": 26, "unshare": 303,
                           "setns": 339, "process_vm_readv": 340, "process_vm_writev": 341, "prlimit64": 334,
                           "socketcall": 102}, 1),
}
SECCOMP_ARCH["arm64"] = SECCOMP_ARCH["aarch64"]
# Landlock (Linux >= 5.13, unprivileged): a process in a Landlock domain cannot ptrace -- nor
# open /proc/<pid>/mem, which seccomp cannot tell from other files -- any process outside it,
# whatever their uids; from ABI 6 it cannot signal them either. Weak mode puts the program in
# a domain of its own that also keeps its files to what strict mode's root would show it: it
# reads and runs only the Python installation and system libraries (strict mode's binds), /proc
# and the random devices, and writes only in its working directory (which it also reads), in
# /dev/shm (multiprocessing's semaphores) and the null devices. So it can neither read the
# caller's files -- expected answers, the run directory, your home -- nor rewrite the verifier's
# code, the run's checkpoints or anything else its uid owns (as root, every file). From ABI 4
# the domain also refuses TCP bind and connect (the seccomp filter refuses IP sockets anyway).
# Landlock checks opens, not lookups: stat still sees the names and sizes of other files, and
# a pathname Unix socket is reached by connect, which it does not check (before ABI 6 nor an
# abstract one). The same syscall numbers on every architecture.
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, LANDLOCK_SCOPE_SIGNAL = 1, 2
LANDLOCK_READ_ACCESS = 0b1101  # EXECUTE, READ_FILE, READ_DIR (ABI 1)
# The write accesses: WRITE_FILE, REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG,
# MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM (ABI 1), REFER (ABI 2), TRUNCATE (ABI 3).
LANDLOCK_WRITE_ACCESS = {1: 0b1_1111_1111_0010, 2: 0b11_1111_1111_0010, 3: 0b111_1111_1111_0010}
LANDLOCK_FILE_ACCESS = 0b111 | 1 << 14  # EXECUTE, WRITE_FILE, READ_FILE, TRUNCATE: what a rule on a file may grant
LANDLOCK_MAKE_DEVICE = 1 << 6 | 1 << 11  # MAKE_CHAR, MAKE_BLOCK: granted nowhere
LANDLOCK_NET_TCP = 0b11  # BIND_TCP, CONNECT_TCP (ABI 4): granted nowhere
LANDLOCK_WRITABLE = ("/dev/shm", "/dev/null", "/dev/zero", "/dev/full")
LANDLOCK_READABLE = ("/proc", "/dev/random", "/dev/urandom")
# statvfs f_flag bit -> mount flag, to keep a mount's locked flags when remounting it read-only
ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME,
            2048: MS_NODIRATIME, 4096: MS_RELATIME}

SETUP_FAILED = 125  # exit code of a runner that could not be set up (not the program's fault)
RUNNER_START_S = 10.0  # longest a fresh runner interpreter may take to start (a loaded machine)
# The CPU verdict is "timeout" past cpu_s * (1 + cpu_margin), from the kernel's count. The kill
# comes a little later (+50 ms): a backstop, so a program is never stopped short of that line.
CPU_SLACK_S = 0.05
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
    # a venv in a temporary directory (a clone in mktemp -d): each job's private /tmp would hide
    # it, so it gets a second view that the job binds back over its /tmp
    init["tmp_binds"] = [p for p in init["binds"] if p.startswith("/tmp/") and os.path.isdir(p)]
    for i, path in enumerate(init["tmp_binds"]):
        _bind_into(new_root, path, f"{TMP_BINDS}/{i}")
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
    _probe_seccomp_filter(sockets=True)
    who = f"uid {init['sandbox_uid']}" if root else f"your uid {uid} (read-only files)"
    return ["network namespace (no interfaces)", "mount namespace: read-only minimal root",
            "PID namespace per job (tree killed with its init)", "IPC namespace per job",
            "private size-limited /tmp per job", f"user namespace per test, {who}, no capabilities",
            f"seccomp: sockets of {', '.join(SOCKET_FAMILIES)} only (no vsock, netlink...), no io_uring, "
            "no ptrace or process_vm_readv/writev, no new namespaces, no prlimit on another process",
            "rlimits: cpu, address space, processes, open files, file size"]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_filter(machine: str, sockets: bool = True) -> list[tuple[int, int, int, int]]:
    """The classic-BPF seccomp program described at ``SOCKET_FAMILIES``, for ``machine``: with
    ``sockets`` (strict mode), sockets of those families; without (weak mode), of AF_UNIX only."""
    if machine not in SECCOMP_ARCH:
        raise OSError(38, f"seccomp: syscall numbers unknown for {machine} (known: {', '.join(SECCOMP_ARCH)})")
    arch, nr, clone_arg = SECCOMP_ARCH[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
    allow, eperm, enosys, eafnosupport = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38, 0x00050000 | 97

    def low_half(arg: int) -> int:  # offset of the low 32 bits of seccomp_data.args[arg]
        return 16 + 8 * arg + (0 if sys.byteorder == "little" else 4)

    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, enosys),   # seccomp_data.arch
            (ld, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, enosys)]  # .nr; x32's bit
    refused = [(435, enosys), (438, eperm)] + [(nr[name], eperm) for name in (
        "ptrace", "process_vm_readv", "process_vm_writev", "setns")]
    if "socketcall" in nr:
        refused.append((nr["socketcall"], enosys))
    refused.append((425, enosys))  # io_uring_setup
    for number, errno in refused:
        prog += [(jeq, 0, 1, number), (ret, 0, 0, errno)]
    for number, arg, flags in ((nr["unshare"], 0, CLONE_NEW_FLAGS | CLONE_NEWTIME), (nr["clone"], clone_arg, CLONE_NEW_FLAGS)):
        prog += [(jeq, 0, 4, number), (ld, 0, 0, low_half(arg)), (jset, 0, 1, flags), (ret, 0, 0, eperm),
                 (ret, 0, 0, allow)]
    prog += [(jeq, 0, 4, nr["prlimit64"]), (ld, 0, 0, low_half(0)), (jeq, 1, 0, 0), (ret, 0, 0, eperm),
             (ret, 0, 0, allow)]  # pid_t: its low half is all of it
    families = list(SOCKET_FAMILIES.values()) if sockets else [SOCKET_FAMILIES["AF_UNIX"]]
    prog += [(jeq, 2, 0, nr["socket"]), (jeq, 1, 0, nr["socketpair"]), (ret, 0, 0, allow), (ld, 0, 0, low_half(0))]
    prog += [(jeq, len(families) - i, 0, family) for i, family in enumerate(families)]
    return prog + [(ret, 0, 0, eafnosupport), (ret, 0, 0, allow)]


socket_filter = seccomp_filter  # its name before it refused more than sockets


def install_seccomp_filter(sockets: bool) -> None:
    """Install ``seccomp_filter`` on this process (no_new_privs must be set); inherited by every
    process it starts, across exec."""
    prog = seccomp_filter(platform.machine(), sockets)
    filters = (_SockFilter * len(prog))(*(_SockFilter(*f) for f in prog))
    fprog = _SockFprog(len(prog), filters)
    _check(_libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0),
           "prctl(PR_SET_SECCOMP)")


def _probe_seccomp_filter(sockets: bool) -> None:
    """Raise OSError if this kernel refuses the filter."""
    seccomp_filter(platform.machine(), sockets)  # an unknown machine raises here, with its message
    err = _in_child(lambda: install_seccomp_filter(sockets))
    if err:
        raise OSError(err, f"seccomp filter refused by the kernel: {os.strerror(err)}")


def _in_child(restrict) -> int:
    """Try ``restrict`` (for good once applied) after no_new_privs in a child: 0, or its errno."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            restrict()
            code = 0
        except OSError as e:
            code = e.errno or 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (before 5.13, or not enabled)."""
    version = _libc.syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, version)


def enter_landlock_domain(abi: int, writable: tuple[str, ...] = (), readable: tuple[str, ...] = ()) -> None:
    """Put this process (and all it starts) in a Landlock domain of its own that reads files only
    under ``readable``, ``LANDLOCK_READABLE`` and what it may write, writes them only under
    ``writable`` and ``LANDLOCK_WRITABLE``, and makes no TCP connections: see ``SYS_LANDLOCK_*``."""
    scoped = LANDLOCK_SCOPE_SIGNAL | LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET if abi >= 6 else 0
    net = LANDLOCK_NET_TCP if abi >= 4 else 0
    handled = LANDLOCK_READ_ACCESS | LANDLOCK_WRITE_ACCESS[min(abi, 3)]
    attr = (ctypes.c_uint64 * 3)(handled, net, scoped)  # struct landlock_ruleset_attr: fs, net, scoped
    fd = _libc.syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                       ctypes.c_size_t(24 if scoped else 16 if net else 8), ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    write = handled & ~LANDLOCK_MAKE_DEVICE
    grants = [(path, write) for path in (*writable, *LANDLOCK_WRITABLE)]
    grants += [(path, LANDLOCK_READ_ACCESS) for path in (*readable, *LANDLOCK_READABLE)]
    try:
        for path, access in grants:
            try:
                parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                if path in writable:
                    raise
                continue  # not on this machine (no /dev/shm: multiprocessing fails there unsandboxed too)
            try:
                allowed = access if os.path.isdir(path) else access & LANDLOCK_FILE_ACCESS
                rule = struct.pack("=Qi", allowed, parent)  # struct landlock_path_beneath_attr (packed)
                _check(_libc.syscall(ctypes.c_long(SYS_LANDLOCK_ADD_RULE), ctypes.c_int(fd),
                                     ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)),
                       f"landlock_add_rule({path})")
            finally:
                os.close(parent)
        _check(_libc.syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(fd), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    finally:
        os.close(fd)


def _write_id_maps(uid: int, gid: int, as_root: bool = False) -> None:
    """Map the new user namespace's ids to ``uid``/``gid`` outside: the same ids inside, or 0."""
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{0 if as_root else uid} {uid} 1")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{0 if as_root else gid} {gid} 1")


TMP_BINDS = "/.rlxf-tmp-binds"


def _bind_into(new_root: str, path: str, at: str | None = None) -> None:
    """Make ``path`` of the host visible, read-only, at the same place (or ``at``) under ``new_root``."""
    target = new_root + (at or path)
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

class Context:
    """What every job of this server needs: its configuration and its control groups."""

    def __init__(self, init: dict, cgroups, runner: str, paths: list[str]):
        self.init = init
        self.cgroups = cgroups        # _cgroup.Cgroups, or None: rlimits and rusage only
        self.runner = runner          # source of _runner.py (not visible after pivot_root)
        self.paths = paths            # site-packages directories for the runner's sys.path
        self.jobs = 0


def run_job(job: dict, ctx: Context) -> dict:
    """Fork a launcher for ``job`` and wait for its answer, at most the job's deadline; a
    message from the host meanwhile cancels the job, and the host's end of input (it died)
    ends this server too."""
    limits = job["limits"]
    ctx.jobs += 1
    group = f"job{ctx.jobs}"
    deadline = time.monotonic() + len(job["tests"]) * limits["wall_s"] + RUNNER_START_S
    r, w = os.pipe()
    log_fd = _memfd("launcher-stderr")  # the launcher's, init's and runner's own errors
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # launcher
        code = 1
        try:
            os.close(r)
            os.dup2(log_fd, 2)
            code = _launcher(job, ctx, group, w, server_pid)
        except BaseException:  # noqa: BLE001 - report, never return into the server loop
            traceback.print_exc()
        os._exit(code)
    os.close(w)
    try:
        data, err = _read_until(r, deadline)
    finally:
        os.close(r)
        if ctx.cgroups is not None:
            ctx.cgroups.kill(group)  # weak mode has no PID namespace to take the tree down
    if err:
        _kill_and_reap(pid)
        os.close(log_fd)
        _remove_group(ctx, group)
        if err == "host gone":
            sys.exit(0)
        return {"error": err}
    _, status = os.waitpid(pid, 0)
    _remove_group(ctx, group)
    size = os.fstat(log_fd).st_size
    log = os.pread(log_fd, 2000, max(0, size - 2000)).decode("utf-8", "replace").strip()
    os.close(log_fd)
    if not data:
        return {"error": f"sandbox launcher exited with status {os.waitstatus_to_exitcode(status)} and no "
                         f"result: {log or 'no message'}"}
    return json.loads(data)


def _remove_group(ctx: Context, group: str) -> None:
    if ctx.cgroups is not None:
        ctx.cgroups.remove(group)


def _read_until(fd: int, deadline: float) -> tuple[bytes, str | None]:
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"", "job wall-time budget exceeded; the whole process tree was killed"
        ready, _, _ = select.select([fd, 0], [], [], left)
        if 0 in ready:  # the host never writes during a job unless it cancels it (or died)
            msg = recv(0)
            if msg is None:
                return b"", "host gone"
            return b"", "cancelled by the caller; the whole process tree was killed"
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


def _launcher(job: dict, ctx: Context, group: str, result_fd: int, server_pid: int) -> int:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:  # the server died before we set the death signal
        return 1
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)  # the protocol pipes are the server's, not ours
    os.dup2(devnull, 1)
    os.close(devnull)
    if ctx.init["mode"] == "weak":
        return _init_process(job, ctx, group, result_fd)
    unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC, "mount+pid+ipc")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            # getppid() is 0 here (our parent is outside the namespace), so unlike the launcher
            # we cannot check for a parent that died before this line; its jobs are bounded
            # by their own limits anyway
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            code = _init_process(job, ctx, group, result_fd)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        os._exit(code)
    os.close(result_fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) & 0xFF


class _Job:
    """The init's view of one program: its runner, its control group, its accounting."""

    def __init__(self, job: dict, ctx: Context, group: str, workdir: str):
        self.limits = job["limits"]
        self.ctx = ctx
        self.group = group if ctx.cgroups is not None else None
        self.workdir = workdir
        self.runner_pid = 0
        self.sock: socket.socket | None = None
        self.gone: str | None = None  # why the runner serves no more tests

    # -- accounting: the kernel's, never the program's word ------------------------------------

    def cpu(self) -> float:
        if self.group is not None:
            return self.ctx.cgroups.cpu_s(self.group)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every reaped descendant
        return usage.ru_utime + usage.ru_stime

    def oom_kills(self) -> int:
        return self.ctx.cgroups.oom_kills(self.group) if self.group is not None else 0

    # -- the runner ------------------------------------------------------------------------------

    def start_runner(self, job: dict) -> None:
        ctx, limits = self.ctx, self.limits
        if self.group is not None:
            mb = 1 << 20
            ctx.cgroups.create(self.group, limits["memory_mb"] * mb, limits["max_processes"] + 1)
        spec = {"code": job["code"], "tests": job["tests"], "paths": ctx.paths, "preload": ctx.init["preload"]}
        spec_fd = os.memfd_create("spec", 0)  # inherited by the runner, which reads and closes it
        os.write(spec_fd, marshal.dumps(spec))  # the runner has no json (its import is slow)
        os.lseek(spec_fd, 0, os.SEEK_SET)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                mine.close()
                if self.group is not None:
                    ctx.cgroups.attach_self(self.group)
                    ctx.cgroups.close()
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                _enter_sandbox(limits, ctx.init, self.workdir)
                os.set_inheritable(theirs.fileno(), True)
                os.execve(sys.executable, [sys.executable, "-I", "-S", "-c", ctx.runner, str(spec_fd),
                                           str(theirs.fileno())], os.environ)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            os._exit(SETUP_FAILED)
        os.close(spec_fd)
        theirs.close()
        self.runner_pid, self.sock = pid, mine
        # its start-up (imports) is not the program's CPU: the tests' counts begin after it
        if not select.select([mine], [], [], RUNNER_START_S)[0] or mine.recv(64) != b"ready":
            raise OSError("the test runner did not start (see its error above)")

    def stop_runner(self) -> None:
        if self.sock is not None:
            self.sock.close()
        if self.runner_pid:
            _kill_and_reap(self.runner_pid)
        _kill_strays(set())

    # -- one test --------------------------------------------------------------------------------

    def run_test(self, index: int) -> dict:
        limits = self.limits
        cpu0, oom0 = self.cpu(), self.oom_kills()
        start = time.monotonic()
        started = self._start_test(index)
        if isinstance(started, str):  # the program's doing: its earlier tests, or its limits
            return {"status": "error", "stderr": started}
        pid, fds = started
        exited, cpu_killed = self._wait(pid, cpu0, start + limits["wall_s"])
        if not exited:
            _kill_group(pid)
        _, status = os.waitpid(pid, 0)
        # what it left running, looked at before anything is killed: a child still in its group
        # (forked, not yet setsid) is as much a stray as one that left, whatever the timing
        left_running = exited and any(not _is_zombie(kid) for kid in _children() if kid != self.runner_pid)
        _kill_group(pid)  # whatever it started and left in its process group, all at once
        wall = time.monotonic() - start
        strays = _kill_strays({self.runner_pid}) or left_running
        cpu, oom = self.cpu() - cpu0, self.oom_kills() - oom0
        cap = limits["max_output_bytes"]
        stdout = os.pread(fds[0], cap + 1, 0)
        stderr_size = os.fstat(fds[1]).st_size
        stderr = os.pread(fds[1], 4096, max(0, stderr_size - 4096))
        result = os.pread(fds[2], cap + 1, 0)
        for fd in fds:
            os.close(fd)
        return {
            "status": _classify(exited, status, cpu, _cpu_line(limits), cpu_killed, oom, stderr, strays),
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "cpu_s": round(cpu, 4), "wall_s": round(wall, 4),
            "stdout": stdout[:cap].decode("utf-8", "replace"), "stdout_truncated": len(stdout) > cap,
            "stderr": stderr.decode("utf-8", "replace"), "result": result[:cap].decode("utf-8", "replace"),
            "strays": strays,
        }

    def _start_test(self, index: int) -> tuple[int, list[int]] | str:
        """Ask the runner for test ``index``'s process: its pid and output memfds, or why there
        is none (the runner could not fork it, or is gone: an earlier test stopped or killed it).
        The runner started (start_runner checked), so either way a test of this program did it."""
        if self.sock is None:
            return self.gone or self._runner_gone("it did not start")
        try:
            # a test may have stopped every process it could see, the runner too (SIGSTOP): go on
            os.kill(self.runner_pid, signal.SIGCONT)
            self.sock.send(str(index).encode())
            if not select.select([self.sock], [], [], RUNNER_START_S)[0]:
                self.sock.close()  # it does not answer: the tests after this one are not waited for
                self.sock = None
                return self._runner_gone(f"it did not answer within {RUNNER_START_S:g} s")
            msg, fds, _, _ = socket.recv_fds(self.sock, 256, 3)
        except OSError as e:
            return self._runner_gone(f"its socket failed: {e}")
        if msg.startswith(b"!") and not fds:
            return (f"the test runner could not fork this test's process: {msg[1:].decode('utf-8', 'replace')}. "
                    f"An earlier test of this program left the runner no room: its processes and threads "
                    f"(max_processes={self.limits['max_processes']}) or its memory (memory_mb="
                    f"{self.limits['memory_mb']}, /tmp files and shared memory included)")
        if not msg or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            return self._runner_gone("its socket closed" if not msg else f"it sent {len(fds)} file descriptors, not 3")
        return int(msg), fds

    def _runner_gone(self, how: str) -> str:
        """Why the runner serves no more tests, with its exit status once it has one (its socket
        closes as it exits: a second is plenty for the kernel to finish)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        pid, status = 0, 0
        for _ in range(100 if self.runner_pid else 0):
            try:
                pid, status = os.waitpid(self.runner_pid, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                break
            time.sleep(0.01)
        if pid:
            self.runner_pid = 0  # reaped: never signal that pid again
            how = (f"it was killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"it exited with status {os.WEXITSTATUS(status)}")
            if self.oom_kills():
                how += (f"; the kernel killed processes for memory: what earlier tests left (files in /tmp, "
                        f"shared memory) counts against memory_mb={self.limits['memory_mb']}")
        self.gone = f"the program's test runner is gone ({how}): an earlier test of this program stopped or killed it"
        return self.gone

    def _wait(self, pid: int, cpu0: float, wall_deadline: float) -> tuple[bool, bool]:
        """Wait for ``pid`` to exit (unreaped): (exited, killed for CPU). With a control group,
        poll the program's total CPU and kill the tree once it is past its budget plus margin;
        without one, each process's RLIMIT_CPU is the only CPU stop."""
        limit = _cpu_line(self.limits) + CPU_SLACK_S
        pidfd = os.pidfd_open(pid)
        try:
            while True:
                left = wall_deadline - time.monotonic()
                if left <= 0:
                    return False, False
                wait = left
                if self.group is not None:
                    spent = self.cpu() - cpu0
                    if spent > limit:
                        _kill_group(pid)
                        select.select([pidfd], [], [])
                        return True, True
                    wait = min(left, max(0.005, min(0.1, (limit - spent) / (os.cpu_count() or 1))))
                if select.select([pidfd], [], [], wait)[0]:
                    return True, False
        finally:
            os.close(pidfd)


def _init_process(job: dict, ctx: Context, group: str, result_fd: int) -> int:
    """PID 1 of the job (strict) or the job's subreaper (weak): start the runner, run each
    test through it, account and classify each from the kernel's figures, report."""
    limits = job["limits"]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)  # init ignores signals it has no handler for
    init = ctx.init
    strict = init["mode"] == "strict"
    if strict:
        ident = init["sandbox_uid"] if os.geteuid() == 0 else os.getuid()
        size = f"size={limits['tmp_mb']}m,nr_inodes={limits['tmp_inodes']}"
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
              f"mode=0700,uid={ident},gid={init['sandbox_gid'] if os.geteuid() == 0 else os.getgid()},{size}")
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for i, path in enumerate(init["tmp_binds"]):  # read-only, as the mount it binds
            os.makedirs(path, exist_ok=True)
            mount(f"{TMP_BINDS}/{i}", path, None, MS_BIND | MS_REC)
        if os.geteuid() != 0:  # only the root of the IPC namespace's owner may set its limits
            _enter_ipc_namespace_with_limits(limits["memory_mb"] << 20)
        else:
            _limit_sysv_shm(limits["memory_mb"] << 20)
        workdir = "/tmp"
    else:
        prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the program come back to us
        workdir = tempfile.mkdtemp(prefix="rlxf-sandbox-")
        if init.get("drop_root"):  # the program's uid
            os.chown(workdir, init["sandbox_uid"], init["sandbox_gid"])
    runner = _Job(job, ctx, group, workdir)
    outcomes = []
    try:
        runner.start_runner(job)
        for i, _ in enumerate(job["tests"]):
            if job.get("fail_fast") and outcomes and outcomes[-1]["status"] != "ok":
                outcomes.extend({"status": "skipped"} for _ in job["tests"][i:])
                break
            outcomes.append(runner.run_test(i))
        peak = ctx.cgroups.peak_bytes(group) if runner.group is not None else 0
    finally:
        runner.stop_runner()
        if not strict:
            _rmtree(workdir)
    payload = json.dumps({"tests": outcomes, "memory_peak_mb": round(peak / (1 << 20), 2)}).encode()
    while payload:
        payload = payload[os.write(result_fd, payload):]
    os.close(result_fd)
    return 0


def _limit_sysv_shm(limit: int) -> None:
    """System V shared memory of this job's IPC namespace: at most ``limit`` bytes in all."""
    pages = max(1, limit // os.sysconf("SC_PAGE_SIZE"))
    for name, value in (("shmmax", limit), ("shmall", pages), ("shmmni", 64)):
        try:
            with open(f"/proc/sys/kernel/{name}", "w") as f:
                f.write(str(value))
        except OSError:  # the memory cgroup (where there is one) still charges the segments
            pass


def _enter_ipc_namespace_with_limits(limit: int) -> None:
    """Not root: the IPC sysctls are writable only by uid 0 of the user namespace that owns the
    IPC namespace, and ours maps only our own uid. A helper child makes a user namespace where
    it is 0 (our uid outside), a fresh IPC namespace there, sets its limits; we join that one
    (we hold every capability over a child user namespace of our own uid)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            uid, gid = os.getuid(), os.getgid()
            prctl(PR_SET_DUMPABLE, 1)  # off since setup_strict: /proc/self would be root's
            unshare(CLONE_NEWUSER, "user")
            _write_id_maps(uid, gid, as_root=True)
            unshare(CLONE_NEWIPC, "ipc")
            _limit_sysv_shm(limit)
            os.write(w, b"1")
            signal.pause()
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        os._exit(code)
    os.close(w)
    try:
        if os.read(r, 1) != b"1":
            raise OSError("could not set up the job's IPC namespace")
        fd = os.open(f"/proc/{pid}/ns/ipc", os.O_RDONLY)
        try:
            _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(CLONE_NEWIPC)), "setns(ipc)")
        finally:
            os.close(fd)
    finally:
        os.close(r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _rmtree(path: str) -> None:
    import shutil  # noqa: PLC0415 - weak mode only

    shutil.rmtree(path, ignore_errors=True)


def _memfd(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    if data:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _kill_group(pid: int) -> None:
    """SIGKILL the test's process group (it made itself a session leader): one signal the kernel
    delivers to every member at once, so a fork bomb cannot refill what one-by-one kills free.
    Members that left the group are ``_kill_strays``' to find."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _kill_strays(keep: set[int]) -> bool:
    """Kill every child of ours but ``keep``, and the orphans that come back to us as they
    die, until none is left; True if any was still running (exited zombies are no strays)."""
    found = False
    while True:
        kids = [k for k in _children() if k not in keep]
        if not kids:
            return found
        for kid in kids:
            found = found or not _is_zombie(kid)
            try:
                os.kill(kid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for kid in kids:
            try:
                os.waitpid(kid, 0)
            except ChildProcessError:
                pass


def _children() -> list[int]:
    kids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                kids.extend(int(p) for p in f.read().split())
        except OSError:
            pass
    return kids


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _cpu_line(limits: dict) -> float:
    """CPU seconds past which a test is a timeout: the budget plus its margin for load."""
    return limits["cpu_s"] * (1 + limits.get("cpu_margin", 0.0))


def _classify(exited: bool, status: int, cpu: float, cpu_limit: float, cpu_killed: bool, oom: int,
              stderr: bytes, strays: bool) -> str:
    """The verdict, from what the kernel accounted: CPU over budget is a timeout whatever the
    program printed or how it exited (a SIGXCPU handler that prints an answer included)."""
    if cpu > cpu_limit or cpu_killed:
        return "timeout"
    if not exited:
        return "wall_timeout"
    if oom:
        return "memory"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "timeout"
        if sig == signal.SIGXFSZ:
            return "output_limit"
        return "killed"
    if os.WEXITSTATUS(status) != 0:
        tail = stderr[-400:]
        if b"MemoryError" in tail:
            return "memory"
        # Python ignores SIGXFSZ, so the file-size limit surfaces as an EFBIG error
        return "output_limit" if b"[Errno 27] File too large" in tail else "error"
    return "stray_processes" if strays else "ok"


def _enter_sandbox(limits: dict, init: dict, workdir: str) -> None:
    """Drop into the program's limits and identity (the runner, before it execs Python)."""
    strict = init["mode"] == "strict"
    mb = 1 << 20
    cpu = max(1, math.ceil(_cpu_line(limits) + CPU_SLACK_S))
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
        # program alone (per-namespace ucounts, Linux >= 5.14), not across concurrent sandboxes
        # sharing the uid; and its capabilities there own nothing (mounts, network, PIDs
        # belong to the parent namespace).
        uid, gid = os.getuid(), os.getgid()
        unshare(CLONE_NEWUSER, "user")
        _write_id_maps(uid, gid)
    if not strict and init.get("drop_root"):
        _drop_root(init)
    nproc = limits["max_processes"] + 1  # + the runner
    if not strict and os.geteuid() != 0:  # counted across all of this user's threads
        nproc += _tasks_of(os.getuid())
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if not strict and init.get("landlock"):
        enter_landlock_domain(init["landlock"], writable=(workdir,), readable=tuple(init["binds"]))
    if strict or init.get("seccomp"):
        install_seccomp_filter(sockets=strict)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(init["env"])
    os.environ["HOME"] = os.environ["TMPDIR"] = workdir


def _capabilities(field: str) -> int:
    """This process's capability set ``field`` (``CapEff``, ``CapBnd``...) as a bit mask."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1], 16) for line in f if line.startswith(field + ":"))


def _can_drop_root() -> bool:
    """Whether ``_drop_root`` can work here: it changes uid (CAP_SETUID, CAP_SETGID) and empties
    the bounding set (CAP_SETPCAP, unless it holds nothing beyond what it keeps)."""
    eff = _capabilities("CapEff")
    return (bool(eff >> CAP_SETUID & 1 and eff >> CAP_SETGID & 1)
            and (bool(eff >> CAP_SETPCAP & 1) or not _capabilities("CapBnd") & ~(1 << CAP_DAC_READ_SEARCH)))


def _drop_root(init: dict) -> None:
    """Weak mode as root: the runner and all it starts run as ``sandbox_uid``, a uid none of your
    processes or files have, with one capability, CAP_DAC_READ_SEARCH (reading the Python
    installation wherever it lives; ambient, so Python keeps it). Every other capability leaves
    the bounding set, so no exec grants one. The program can then neither read nor trace the
    caller's memory (the expected answers stay there), nor signal root's processes (the
    caller's, the judge's), nor write root's files, and RLIMIT_NPROC, which root is exempt
    from, bounds its forks."""
    keep = 1 << CAP_DAC_READ_SEARCH
    bounding = _capabilities("CapBnd")
    for cap in range(bounding.bit_length()):
        if bounding >> cap & 1 and not keep >> cap & 1:
            _check(_libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0), f"prctl(PR_CAPBSET_DROP, {cap})")
    prctl(PR_SET_KEEPCAPS, 1)  # the permitted set survives the uid change; prctl's doc: cleared on exec
    uid, gid = init["sandbox_uid"], init["sandbox_gid"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    mine = keep & _capabilities("CapPrm")
    data = (ctypes.c_uint32 * 6)(mine, mine, mine, 0, 0, 0)  # effective, permitted, inheritable (x2)
    _check(_libc.capset(header, data), "capset")
    if mine:
        _check(_libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_RAISE), ctypes.c_ulong(CAP_DAC_READ_SEARCH),
                           0, 0), "prctl(PR_CAP_AMBIENT_RAISE)")


def _tasks_of(uid: int) -> int:
    """What RLIMIT_NPROC counts for ``uid``: tasks, threads included, by real uid -- read from
    each process's status, as its /proc directory is root's when it is not dumpable."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                count += int(fields["Threads"]) if int(fields["Uid"].split()[0]) == uid else 0
            except (OSError, KeyError, ValueError, IndexError):  # exited meanwhile
                pass
    return count


def setup_weak(init: dict, cgroups: bool) -> list[str]:
    """Decide what weak mode can apply on this machine (each part is optional, unlike strict's)
    and return the mechanisms in force, what is missing named as such."""
    prctl(PR_SET_DUMPABLE, 0)  # the job's init is a fork of us: a program (same uid) reaches neither
    if os.geteuid() == 0:
        init["drop_root"] = _can_drop_root()
    abi = landlock_abi()
    err = _in_child(lambda: enter_landlock_domain(abi, readable=tuple(init["binds"]))) if abi else 0
    init["landlock"] = abi if abi and not err else 0
    try:
        _probe_seccomp_filter(sockets=False)
        init["seccomp"] = True
        seccomp = ("seccomp: sockets of AF_UNIX only (no network: IPv4, IPv6, netlink, vsock...), no io_uring, "
                   "no ptrace or process_vm_readv/writev, no new namespaces, no prlimit on another process; open: "
                   "Unix sockets its uid may connect to by path (a Docker socket, an ssh agent)"
                   + ("" if init["landlock"] >= 6 else " or by abstract name (no Landlock ABI 6)"))
    except OSError as e:
        network = ("UDP reaches the network (Landlock refuses TCP bind and connect only)"
                   if init["landlock"] >= 4 else "the NETWORK is reachable")
        seccomp = (f"NO seccomp filter ({e}): ptrace, process_vm_readv, new namespaces and lowering the "
                   f"limits of your other processes (prlimit) are allowed; {network}")
    return ["rlimits: cpu, address space, open files, file size", *_weak_identity(init), _weak_reads(init), seccomp,
            "process-count limit" if os.geteuid() != 0 or cgroups or init["drop_root"] else
            "NO process-count limit (root is exempt from RLIMIT_NPROC: a fork bomb is not bounded)",
            "scrubbed environment", "temporary working directory", "process-tree kill (subreaper)"]


def _weak_identity(init: dict) -> list[str]:
    """What the program's identity allows in weak mode (the mechanisms list says it)."""
    abi = init.get("landlock", 0)
    if os.geteuid() != 0:
        if abi >= 6:
            return [f"your uid {os.getuid()}: a Landlock domain keeps its writes in its working directory and it "
                    "from your processes (no ptrace, /proc/<pid>/mem or signals)"]
        if abi:
            return [f"your uid {os.getuid()}: the program can send your processes signals (Landlock ABI < 6); a "
                    "Landlock domain keeps its writes in its working directory and it from your processes' memory "
                    "(no ptrace or /proc/<pid>/mem)"]
        return [f"your uid {os.getuid()}, NO Landlock: the program can read and write your files, send your "
                "processes signals and, where ptrace is allowed (kernel.yama.ptrace_scope 0 or no Yama), "
                "read the memory of those not made non-dumpable through /proc/<pid>/mem -- the caller's "
                "expected answers included. Run as root or on Linux >= 5.13 with Landlock enabled"]
    if init["drop_root"]:
        writes = ("writes files only in its working directory" if abi else
                  f"writes only where uid {init['sandbox_uid']} may (its working directory, world-writable places)")
        signals = ("a Landlock domain keeps it from signalling other programs of that uid" if abi >= 6 else
                   "it can signal other programs of that uid (Landlock ABI < 6)")
        return [f"uid {init['sandbox_uid']} (sandbox_uid; rlxf runs as root) with one capability, reading files: "
                f"your processes' memory and signals are out of its reach; {signals}; it {writes}"]
    return ["ROOT WITH CAPABILITIES (no CAP_SETUID, CAP_SETGID or CAP_SETPCAP to drop them): the program can "
            "read the caller's memory, its expected answers included"]


def _weak_reads(init: dict) -> str:
    """Which files a weak program can read (the mechanisms list says it)."""
    if init.get("landlock"):
        return ("Landlock: the program reads only the Python installation and system libraries (strict mode's "
                "binds), /proc, /dev/shm, the null and random devices and its working directory: not your files, "
                "the run's or the expected answers' (stat still sees names and sizes; /proc shows command lines)"
                + ("; no TCP bind or connect" if init["landlock"] >= 4 else ""))
    who = ("your uid" if os.geteuid() != 0 else
           f"uid {init['sandbox_uid']} with CAP_DAC_READ_SEARCH (every file)" if init["drop_root"] else "root")
    return (f"NO Landlock (Linux >= 5.13 with it enabled confines reads): the program reads every file {who} can "
            "-- the expected answers too, where a file holds them")


# --- main loop -------------------------------------------------------------------------------

def main() -> int:
    init = recv(0)
    if init is None:
        return 0
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "_runner.py")) as f:
        runner = f.read()
    sys.path.insert(0, here)
    from _cgroup import Cgroups, CgroupUnavailable, base_name  # noqa: PLC0415 - our sibling, found via `here`

    # the caller's packages (a venv's): this interpreter is the venv's base, without them
    paths = init.get("site_paths") or [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
    sys.path.extend(p for p in paths if p not in sys.path)  # for the preloads
    for name in init.get("preload", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module is the program's problem
            pass
    cgroups = None
    try:  # before pivot_root: /sys is not in the minimal root
        cgroups = Cgroups(base_name())
        limits = [cgroups.description]
    except CgroupUnavailable as e:
        limits = [f"NO control groups ({e}): rlimits per process; CPU counted over every exited process; "
                  "memory bounded per process (address space) times the process limit, SysV shared "
                  "memory by the IPC namespace, memfds only by the file-size and open-file limits"]
    except OSError as e:
        limits = [f"NO control groups ({e}): rlimits per process only"]
    try:
        mechanisms = setup_strict(init) if init["mode"] == "strict" else setup_weak(init, cgroups is not None)
    except Exception as e:  # noqa: BLE001 - the host decides: refuse, or fall back if allowed
        send(1, {"ok": False, "error": f"{type(e).__name__}: {e}" if not isinstance(e, OSError) else str(e)})
        return 0
    ctx = Context(init, cgroups, runner, paths)
    send(1, {"ok": True, "mechanisms": mechanisms + limits, "pid": os.getpid(),
             "cgroup": cgroups.kind if cgroups else None, "cgroup_paths": cgroups.paths if cgroups else []})
    try:
        while True:
            job = recv(0)
            if job is None:
                return 0
            if job.get("cancel"):  # arrived after its job had finished: nothing to cancel
                continue
            try:
                answer = run_job(job, ctx)
            except Exception as e:  # noqa: BLE001 - one bad job must not take the server down
                answer = {"error": f"sandbox server error: {type(e).__name__}: {e}"}
            send(1, answer)
    finally:  # the host closed our input or died (run_job exits then)
        if cgroups is not None:
            cgroups.remove_base()


if __name__ == "__main__":
    sys.exit(main())

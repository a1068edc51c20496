"""Weak isolation keeps a program off the network and out of files it has no need to read.

Found by review: in weak mode (``isolation: weak``, or ``auto`` where namespaces are refused,
as in a default Docker container) a program could connect to any host -- a server the caller
runs on 127.0.0.1 included -- and read every file its uid could: as root, with
CAP_DAC_READ_SEARCH, every file of the machine; as any user, the caller's expected answers in
a data file. Now its seccomp filter allows Unix sockets only (and no io_uring, which makes
sockets without socket(2)), its Landlock domain refuses TCP bind and connect (ABI >= 4) and
lets it read only what strict mode's root holds (the Python installation, the system
libraries), /proc, the null and random devices and its working directory.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import rlxf.rewards.sandbox as sandbox_package
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, TestCase, _server
from rlxf.rewards.sandbox._server import SECCOMP_ARCH, enter_landlock_domain, landlock_abi, seccomp_filter

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
LIMITS = SandboxLimits(cpu_s=2, wall_s=20, memory_mb=512)
ALLOW, ENOSYS, EAFNOSUPPORT = 0x7FFF0000, 0x00050026, 0x00050061

NETWORK = textwrap.dedent("""
    import ctypes, errno, json, socket, sys
    port = int(sys.stdin.read())
    libc = ctypes.CDLL(None, use_errno=True)
    def attempt(make):
        try:
            make()
            return "ok"
        except OSError as e:
            return errno.errorcode[e.errno]
    def io_uring():  # IORING_OP_SOCKET makes sockets without socket(2)
        if libc.syscall(425, 1, ctypes.create_string_buffer(120)) < 0:
            raise OSError(ctypes.get_errno(), "io_uring_setup")
    print(json.dumps({
        "tcp": attempt(lambda: socket.create_connection(("127.0.0.1", port), 2)),
        "tcp6": attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM)),
        "udp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"?", ("127.0.0.1", port))),
        "netlink": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)),
        "io_uring": attempt(io_uring),
        "unix": attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
        "unix_pair": attempt(socket.socketpair),
    }))
""")

READS = textwrap.dedent("""
    import ctypes, os, sys
    secret = sys.stdin.read().strip()
    libc = ctypes.CDLL(None, use_errno=True)
    class FileHandle(ctypes.Structure):
        _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("f", ctypes.c_ubyte * 128)]
    def by_handle():  # CAP_DAC_READ_SEARCH (the root case keeps it) opens any file by its handle
        handle, mount = FileHandle(128), ctypes.c_int()
        if libc.name_to_handle_at(-100, secret.encode(), ctypes.byref(handle), ctypes.byref(mount), 0):
            raise OSError(ctypes.get_errno(), "name_to_handle_at")
        fd = libc.open_by_handle_at(os.open(".", os.O_RDONLY), ctypes.byref(handle), os.O_RDONLY)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "open_by_handle_at")
        return os.read(fd, 100).decode()
    def linked(link):
        link(secret, link.__name__)
        return open(link.__name__).read()
    read = []
    for name, attempt in [
        ("open", lambda: open(secret).read()),
        ("listdir", lambda: os.listdir(os.path.dirname(secret))),
        ("symlink", lambda: linked(os.symlink)),
        ("hardlink", lambda: linked(os.link)),
        ("proc_root", lambda: open("/proc/self/root" + secret).read()),
        ("by_handle", by_handle),
        ("shadow", lambda: open("/etc/shadow").read()),
    ]:
        try:
            read.append((name, attempt()))
        except OSError:
            pass
    print(read)
""")

# an ordinary program: what it reads, it reads from the Python installation, the devices, /proc
# and its own directory
ORDINARY = textwrap.dedent("""
    import datetime, decimal, fractions, hashlib, json, os, sqlite3, ssl, subprocess, sys, zoneinfo
    with open("data.txt", "w") as f:
        f.write("7")
    db = sqlite3.connect("db.sqlite")
    db.execute("create table t (x)")
    db.execute("insert into t values (?)", (int(open("data.txt").read()),))
    when = datetime.datetime(2024, 1, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")).utcoffset()
    with open("/dev/urandom", "rb") as f:
        noise = f.read(4)
    status = open("/proc/self/status").read()
    child = subprocess.run([sys.executable, "-c", "import json; print(json.dumps([2]))"], capture_output=True,
                           text=True)
    print(db.execute("select x from t").fetchone()[0], when, len(noise) + len(os.urandom(4)), "Pid" in status,
          child.stdout.strip(), str(fractions.Fraction(1, 3) + decimal.Decimal(1).as_integer_ratio()[0]),
          hashlib.sha256(b"").hexdigest()[:4], open(__file__).read().startswith("import"), bool(ssl.OPENSSL_VERSION))
""")


@pytest.fixture(scope="module")
def weak_box():
    with Sandbox(LIMITS, concurrency=1, isolation="weak") as box:
        yield box


@pytest.fixture
def listener():
    """A TCP server of the caller's on 127.0.0.1 (a judge, a model server, an answer service)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def test_a_weak_program_cannot_open_network_sockets(weak_box, listener):
    out = weak_box.run(NETWORK, [TestCase.stdio(str(listener.getsockname()[1]))]).tests[0]
    assert out.status == "ok", out.stderr
    if any(m.startswith("NO seccomp filter") for m in weak_box.mechanisms):  # the network is open: said so
        assert any("NO seccomp filter" in m and "network" in m.lower() for m in weak_box.mechanisms)
        pytest.skip("this kernel or machine refuses the seccomp filter (the mechanisms say the network is open)")
    assert json.loads(out.stdout) == {"tcp": "EAFNOSUPPORT", "tcp6": "EAFNOSUPPORT", "udp": "EAFNOSUPPORT",
                                      "netlink": "EAFNOSUPPORT", "io_uring": "ENOSYS", "unix": "ok",
                                      "unix_pair": "ok"}
    assert any(m.startswith("seccomp: sockets of AF_UNIX only") for m in weak_box.mechanisms)
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing connected


def test_landlock_alone_refuses_tcp_connect(listener, tmp_path):
    """Where the seccomp filter is refused, the Landlock domain (ABI >= 4) still refuses TCP."""
    abi = landlock_abi()
    if abi < 4:
        pytest.skip(f"Landlock ABI {abi} has no network rules")
    address = listener.getsockname()

    def connect() -> None:
        socket.create_connection(address, 2).close()

    assert _server._in_child(connect) == 0  # the control: without the domain it connects
    assert _server._in_child(lambda: (enter_landlock_domain(abi, writable=(str(tmp_path),)), connect())) == 13
    listener.accept()[0].close()  # the control's connection


def test_a_weak_program_cannot_read_files_outside_its_directory(weak_box, tmp_path):
    secret = tmp_path / "expected_answers.json"
    secret.write_text('{"answer": "secret-42"}')
    out = weak_box.run(READS, [TestCase.stdio(str(secret))]).tests[0]
    assert out.status == "ok", out.stderr
    if landlock_abi() == 0:  # no kernel mechanism for it: the mechanisms must say so
        assert any(m.startswith("NO Landlock") and "reads every file" in m for m in weak_box.mechanisms)
        pytest.skip("this kernel has no Landlock: weak programs read what their uid can (documented)")
    assert out.stdout == "[]\n"
    assert any(m.startswith("Landlock: the program reads only") for m in weak_box.mechanisms), weak_box.mechanisms


def test_an_ordinary_program_still_reads_what_it_needs(weak_box):
    try:
        import numpy  # noqa: F401 - the sandbox's programs import what is installed
        code = "import numpy\nprint(int(numpy.arange(4).sum()))\n" + ORDINARY
        expect = "6\n"
    except ImportError:
        code, expect = ORDINARY, ""
    out = weak_box.run(code, [TestCase.stdio("")]).tests[0]
    assert (out.status, out.stdout) == ("ok", expect + "7 1:00:00 8 True [2] 4/3 e3b0 True True\n"), out.stderr


def test_a_weak_program_still_answers_calls_and_asserts(weak_box):
    code = "def add(a, b):\n    return a + b\n"
    tests = [TestCase.call("add", [2, 3]), TestCase.assertion("assert add(1, 1) == 2"),
             TestCase.evaluate(["add(4, 5)"])]
    result = weak_box.run(code, tests)
    assert [t.status for t in result.tests] == ["ok", "ok", "ok"], [t.stderr for t in result.tests]
    assert (result.tests[0].result, result.tests[1].result, result.tests[2].result) == (
        "5", result.tokens[1], '[{"value":9}]')


def test_strict_mode_keeps_its_socket_families(listener):
    """Strict programs still make IP sockets (the empty network namespace scopes them)."""
    try:
        box = Sandbox(LIMITS, concurrency=1)
    except SandboxUnavailable as e:
        pytest.skip(f"strict isolation unavailable here: {e}")
    with box:
        out = box.run(NETWORK, [TestCase.stdio(str(listener.getsockname()[1]))]).tests[0]
    assert out.status == "ok", out.stderr
    assert json.loads(out.stdout) == {"tcp": "ENETUNREACH", "tcp6": "ok", "udp": "ENETUNREACH",
                                      "netlink": "EAFNOSUPPORT", "io_uring": "ENOSYS", "unix": "ok",
                                      "unix_pair": "ok"}


@pytest.mark.parametrize("machine", sorted(SECCOMP_ARCH))
def test_the_weak_filter_allows_unix_sockets_only(machine):
    from tests.integration.test_sandbox_isolation_review2 import run_bpf

    arch, nr, _ = SECCOMP_ARCH[machine]
    strict, weak = seccomp_filter(machine, sockets=True), seccomp_filter(machine, sockets=False)
    for call in ("socket", "socketpair"):  # AF_UNIX 1, AF_INET 2, AF_INET6 10, AF_NETLINK 16, AF_VSOCK 40
        assert [run_bpf(weak, arch, nr[call], (family,)) for family in (1, 2, 10, 16, 40)] == [
            ALLOW, EAFNOSUPPORT, EAFNOSUPPORT, EAFNOSUPPORT, EAFNOSUPPORT]
        assert [run_bpf(strict, arch, nr[call], (family,)) for family in (1, 2, 10, 16, 40)] == [
            ALLOW, ALLOW, ALLOW, EAFNOSUPPORT, EAFNOSUPPORT]
    assert run_bpf(weak, arch, 425) == run_bpf(strict, arch, 425) == ENOSYS  # io_uring_setup


@pytest.mark.parametrize(("euid", "drop_root", "abi", "says"), [
    (1000, False, 7, "Landlock: the program reads only"),
    (1000, False, 0, "NO Landlock (Linux >= 5.13 with it enabled confines reads): the program reads every file "
                     "your uid can"),
    (0, True, 0, "reads every file uid 61000 with CAP_DAC_READ_SEARCH (every file) can"),
    (0, False, 0, "reads every file root can"),
])
def test_weak_mode_says_what_the_program_can_read(monkeypatch, euid, drop_root, abi, says):
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    line = _server._weak_reads({"landlock": abi, "drop_root": drop_root, "sandbox_uid": 61000})
    assert says in line
    assert ("no TCP bind or connect" in line) is (abi >= 4)


@pytest.mark.parametrize(("abi", "says"), [(0, "the NETWORK is reachable"), (3, "the NETWORK is reachable"),
                                           (4, "UDP reaches the network (Landlock refuses TCP bind and connect only)")])
def test_weak_mode_without_seccomp_says_the_network_is_open(monkeypatch, abi, says):
    """A kernel (or machine) that refuses the filter: the mechanisms name what stays open."""
    def refused(sockets: bool) -> None:
        raise OSError(22, "seccomp filter refused by the kernel")

    monkeypatch.setattr(_server, "prctl", lambda option, value: None)  # not on the test process
    monkeypatch.setattr(_server, "_probe_seccomp_filter", refused)
    monkeypatch.setattr(_server, "landlock_abi", lambda: abi)
    monkeypatch.setattr(_server, "_in_child", lambda restrict: 0)
    init = {"binds": [], "sandbox_uid": 61000, "sandbox_gid": 61000}
    mechanisms = _server.setup_weak(init, cgroups=True)
    line = next(m for m in mechanisms if m.startswith("NO seccomp filter"))
    assert line.endswith(says), line


# Run by another uid than root (rlxf as an ordinary user): the program runs as that uid, which
# may read the secret; Landlock, not file permissions, keeps the program from it.
AS_A_USER = textwrap.dedent("""
    import importlib.util, json, sys
    here, secret = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("sandbox", here + "/__init__.py", submodule_search_locations=[here])
    sandbox = importlib.util.module_from_spec(spec)
    sys.modules["sandbox"] = sandbox
    spec.loader.exec_module(sandbox)
    mine = open(secret).read()  # the caller's uid can read it
    with sandbox.Sandbox(sandbox.SandboxLimits(cpu_s=2, wall_s=20), concurrency=1, isolation="weak") as box:
        out = box.run(f"print(open({secret!r}).read())", [sandbox.TestCase.stdio("")]).tests[0]
        print(json.dumps({"mine": mine, "status": out.status, "stdout": out.stdout, "stderr": out.stderr[-300:],
                          "mechanisms": box.mechanisms}))
""")


def test_a_weak_program_of_an_ordinary_user_cannot_read_that_users_files():
    if os.geteuid() != 0:
        pytest.skip("needs root, to become another user")
    user = {"user": 65534, "group": 65534, "extra_groups": []}
    package = str(Path(sandbox_package.__file__).parent)
    pythons = [p for p in (os.path.realpath(sys.executable), "/usr/bin/python3") if _runs_as(user, p, package)]
    if not pythons:
        pytest.skip("no interpreter and checkout that uid 65534 can read")
    folder = tempfile.mkdtemp(prefix="rlxf-weak-reads-")
    try:
        os.chmod(folder, 0o755)
        secret = Path(folder) / "answers.txt"
        secret.write_text("secret-42")
        secret.chmod(0o644)
        done = subprocess.run([pythons[0], "-I", "-c", AS_A_USER, package, str(secret)], capture_output=True,
                              text=True, timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin"}, **user)
    finally:
        shutil.rmtree(folder)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["mine"] == "secret-42"
    if landlock_abi() == 0:
        assert any(m.startswith("NO Landlock") and "your uid" in m for m in result["mechanisms"])
        return
    assert (result["status"], result["stdout"]) == ("error", ""), result
    assert "Permission denied" in result["stderr"]


def _runs_as(user: dict, python: str, package: str) -> bool:
    try:
        return subprocess.run([python, "-c", f"import os; os.listdir({package!r})"], capture_output=True,
                              timeout=30, **user).returncode == 0
    except OSError:  # not executable by that user
        return False


# An interpreter whose kernel seems to lack a mechanism: a seccomp filter (x86_64 numbers) that
# makes the landlock_* syscalls ENOSYS, or prctl(PR_SET_SECCOMP) EINVAL, then runs the real one.
WRAPPER = """#!{python}
import ctypes, os, struct, sys
raw = b"".join(struct.pack("HBBI", *f) for f in {prog!r})
buf = ctypes.create_string_buffer(raw, len(raw))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.prctl(22, 2, ctypes.c_char_p(struct.pack("HxxxxxxQ", len(raw) // 8, ctypes.addressof(buf))), 0, 0) == 0
os.execv({python!r}, [{python!r}] + sys.argv[1:])
"""
LOAD_NR, LOAD_ARG0, JEQ, RET = (0x20, 0, 0, 0), (0x20, 0, 0, 16), 0x15, 0x06
NO_LANDLOCK = [LOAD_NR, *[f for nr in (444, 445, 446) for f in ((JEQ, 0, 1, nr), (RET, 0, 0, ENOSYS))], (RET, 0, 0, ALLOW)]
NO_SECCOMP = [LOAD_NR, (JEQ, 0, 3, 157), LOAD_ARG0, (JEQ, 0, 1, 22), (RET, 0, 0, 0x00050016), (RET, 0, 0, ALLOW)]


@pytest.mark.parametrize("missing", ["landlock", "seccomp"])
def test_weak_mode_without_landlock_or_seccomp_says_what_it_leaves_open(tmp_path, listener, missing):
    if os.uname().machine != "x86_64":
        pytest.skip("the wrapper's filter uses x86_64 syscall numbers")
    if missing == "seccomp" and landlock_abi() < 4:
        pytest.skip("the case of a kernel whose Landlock refuses TCP")
    (tmp_path / "bin").mkdir()  # its folder is readable, as an interpreter's is
    wrapper = tmp_path / "bin" / "python"
    wrapper.write_text(WRAPPER.format(python=sys.executable, prog=NO_LANDLOCK if missing == "landlock" else NO_SECCOMP))
    wrapper.chmod(0o755)
    secret = tmp_path / "expected_answers.json"
    secret.write_text('{"answer": "secret-42"}')
    with Sandbox(LIMITS, concurrency=1, isolation="weak", python=str(wrapper)) as box:
        network = json.loads(box.run(NETWORK, [TestCase.stdio(str(listener.getsockname()[1]))]).tests[0].stdout)
        read = box.run(READS, [TestCase.stdio(str(secret))]).tests[0].stdout
    if missing == "landlock":  # reads are open, and said to be; the filter still keeps the network out
        assert any(m.startswith("NO Landlock") and "reads every file" in m for m in box.mechanisms), box.mechanisms
        assert "secret-42" in read
        assert network["tcp"] == network["udp"] == "EAFNOSUPPORT"
    else:  # the network is open but for TCP, and said to be; reads stay confined
        assert any(m.startswith("NO seccomp filter") and m.endswith("UDP reaches the network (Landlock refuses "
                                                                     "TCP bind and connect only)") for m in box.mechanisms)
        assert (network["tcp"], network["udp"], read) == ("EACCES", "ok", "[]\n")

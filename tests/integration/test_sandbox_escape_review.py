"""Ways out of the sandbox that its namespaces do not close, in each isolation mode.

- strict: a network namespace scopes IPv4/IPv6 and abstract unix sockets, but not AF_VSOCK,
  whose ports are shared with the host (and reach the hypervisor); netlink is the way in to
  the kernel's most attacked code. Only unix, IPv4 and IPv6 sockets may be created.
- weak, as root: the program used to run with root's capabilities, so it could read the
  caller's memory -- where the expected answers are -- through /proc/<pid>/mem.
"""

from __future__ import annotations

import asyncio
import os
import platform
import socket
import sys
import textwrap

import pytest

from rlxf.rewards.code import CodeVerifier
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, TestCase
from rlxf.rewards.sandbox._server import socket_filter
from rlxf.rewards.types import RewardInput

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
LIMITS = SandboxLimits(cpu_s=1, wall_s=15, memory_mb=256)

SOCKETS = textwrap.dedent("""
    import ctypes, errno, socket
    def try_socket(family, kind):
        try:
            socket.socket(family, kind).close()
            return "ok"
        except OSError as e:
            return errno.errorcode[e.errno]
    print("unix", try_socket(socket.AF_UNIX, socket.SOCK_STREAM))
    print("inet", try_socket(socket.AF_INET, socket.SOCK_STREAM))
    print("inet6", try_socket(socket.AF_INET6, socket.SOCK_DGRAM))
    print("netlink", try_socket(socket.AF_NETLINK, socket.SOCK_RAW))
    print("vsock", try_socket(40, socket.SOCK_STREAM))
    a, b = socket.socketpair()
    a.send(b"x")
    print("socketpair", b.recv(1).decode())
""")


@pytest.fixture(scope="module")
def strict_box():
    try:
        box = Sandbox(LIMITS, concurrency=1)
    except SandboxUnavailable as e:
        pytest.skip(f"strict sandbox isolation unavailable here: {e}")
    yield box
    box.close()


def test_strict_programs_get_only_the_socket_families_the_network_namespace_scopes(strict_box):
    out = strict_box.run(SOCKETS, [TestCase.stdio("")]).tests[0]
    assert out.status == "ok", out.stderr
    assert dict(line.split() for line in out.stdout.splitlines()) == {
        "unix": "ok", "inet": "ok", "inet6": "ok", "socketpair": "x",
        "netlink": "EAFNOSUPPORT", "vsock": "EAFNOSUPPORT"}
    assert any("seccomp" in m for m in strict_box.mechanisms)


def test_a_strict_program_cannot_take_a_vsock_port_of_the_host(strict_box):
    """The host's vsock port space is the sandbox's too: the program saw the host's bound port
    (EADDRINUSE) and could have bound or connected to it."""
    try:
        host = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        host.bind((socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY))
    except (AttributeError, OSError) as e:
        pytest.skip(f"no vsock on this host: {e}")
    with host:
        port = host.getsockname()[1]
        probe = f"import socket\ns = socket.socket(40, socket.SOCK_STREAM)\ns.bind((0xFFFFFFFF, {port}))\n"
        out = strict_box.run(probe, [TestCase.stdio("")]).tests[0]
    assert out.status == "error" and "[Errno 97] Address family not supported" in out.stderr, out.stderr


def test_the_socket_filter_names_a_machine_it_has_no_numbers_for():
    with pytest.raises(OSError, match=r"seccomp: syscall numbers unknown for mips64 \(known: x86_64, aarch64"):
        socket_filter("mips64")
    prog = socket_filter(platform.machine() if platform.machine() in ("x86_64", "aarch64") else "x86_64")
    assert all(jt <= len(prog) and jf <= len(prog) for _, jt, jf, _ in prog)
    assert prog[-1] == (0x06, 0, 0, 0x7FFF0000) and prog[-2] == (0x06, 0, 0, 0x00050000 | 97)


ANCESTORS = textwrap.dedent("""
    import os
    pid, reached = os.getpid(), []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        try:
            open(f"/proc/{pid}/mem", "rb").close()   # ptrace-checked: open means readable
            reached.append(pid)
        except OSError:
            pass
    print(sorted(reached) if reached else "none")
""")


def test_weak_mode_as_root_cannot_read_the_callers_memory():
    if os.geteuid() != 0:
        pytest.skip("as another user a weak program runs as you (documented); this is root's case")
    box = Sandbox(LIMITS, concurrency=1, isolation="weak")
    with box:
        out = box.run(ANCESTORS, [TestCase.stdio("")]).tests[0]
        assert (out.status, out.stdout) == ("ok", "none\n"), out.stderr
        assert any("uid 61000 (sandbox_uid; rlxf runs as root)" in m for m in box.mechanisms)
        # it still runs programs, and the verdict says which isolation it ran under
        score = asyncio.run(CodeVerifier("code", box).ascore(RewardInput(
            "sum", "```python\nprint(sum(map(int, input().split())))\n```", [{"input": "3 4\n", "output": "7\n"}])))
        assert score.score == 1.0 and score.metrics["strict_isolation"] == 0.0


def test_the_verdict_says_strict_isolation_was_in_force(strict_box):
    score = asyncio.run(CodeVerifier("code", strict_box).ascore(RewardInput(
        "sum", "```python\nprint(sum(map(int, input().split())))\n```", [{"input": "3 4\n", "output": "7\n"}])))
    assert score.score == 1.0 and score.metrics["strict_isolation"] == 1.0

"""Review 17 of the sandbox: unparsed asserts judged outside the program's process, programs
that use multiprocessing's spawn, prlimit on other processes, and why a test's runner is gone."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from rlxf.rewards.code import CodeVerifier
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, TestCase
from rlxf.rewards.sandbox._server import SECCOMP_ARCH, Context, _Job, _weak_identity, seccomp_filter
from rlxf.rewards.types import RewardInput

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

LIMITS = SandboxLimits(cpu_s=1, wall_s=10, memory_mb=128)
LOOP = ["for a, b, c in [(1, 2, 3), (4, 5, 9)]:\n    assert add(a, b) == c"]  # no parsed form: run as a test
CORRECT = "def add(a, b):\n    return a + b\n"
# each fooled the old harness, which ran the test source in the program's own process
FAKES = {
    "replaces exec": "import builtins\nbuiltins.exec = lambda *a, **k: None\n",
    "replaces compile": "import builtins\n_c = builtins.compile\nbuiltins.compile = lambda *a, **k: _c('0', 'x', 'exec')\n",
    "always equal": "class A:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return A()\n",
    "token from the heap": textwrap.dedent("""
        import gc, os
        for o in gc.get_objects():
            if isinstance(o, dict) and o.get('kind') == 'assert' and 'token' in o:
                os.write(3, o['token'].encode())
                os._exit(0)
    """),
    "token from the frames": textwrap.dedent("""
        import os, sys
        f = sys._getframe()
        while f:
            t = f.f_locals.get('test')
            if isinstance(t, dict) and 'token' in t:
                os.write(3, t['token'].encode())
                os._exit(0)
            f = f.f_back
    """),
    "rewrites the test's locals": textwrap.dedent("""
        import sys
        def add(a, b):
            sys._getframe(1).f_locals['c'] = 0
            return 0
    """),
}


@pytest.fixture(scope="module")
def box():
    with Sandbox(LIMITS, concurrency=2) as sandbox:
        yield sandbox


def test_an_unparsed_assert_cannot_be_faked(box):
    verifier = CodeVerifier("code", box)
    inputs = [RewardInput("add", f"```python\n{code}\n```", LOOP) for code in [CORRECT, *FAKES.values()]]
    results = asyncio.run(verifier.ascore_batch(inputs))
    assert (results[0].score, results[0].metrics["unparsed_asserts"]) == (1.0, 1.0)
    fooled = {name: r.score for name, r in zip(FAKES, results[1:], strict=True) if r.score != 0.0}
    assert fooled == {}


@pytest.mark.parametrize(("code", "source"), [
    ("def f(x):\n    return (x, [x])\n", "for i in range(2):\n    assert f(i) == (i, [i]) and isinstance(f(i), tuple)"),
    ("class Solution:\n    def get(self, a):\n        return {1: a, 'k': {a}, 'b': b'x'}\n",
     "s = Solution()\nassert s.get(2) == {1: 2, 'k': {2}, 'b': b'x'}"),
    ("def sort_in_place(a):\n    a.sort()\n", "x = [3, 1, 2]\nsort_in_place(x)\nassert x == [1, 2, 3]"),
    ("def g(x):\n    if x < 0:\n        raise ValueError(x)\n    return x\n",
     "try:\n    g(-1)\n    assert False\nexcept ValueError:\n    pass\nassert g(2) in (2, 3)"),
    ("import math\nN = 5\ndef h():\n    return 2 ** 5000\n", "assert N == 5 and math.sqrt(4) == 2 and h() == 2 ** 5000"),
    ("class Node:\n    def __init__(self, v, n=None):\n        self.val, self.next = v, n\n"
     "def build(xs):\n    head = None\n    for x in reversed(xs):\n        head = Node(x, head)\n    return head\n",
     "n, out = build([1, 2]), []\nwhile n:\n    out.append(n.val)\n    n = n.next\nassert out == [1, 2]"),
])
def test_an_unparsed_assert_keeps_python_semantics(box, code, source):
    """Tuples stay tuples, in-place edits reach the test, the program's exceptions keep their
    type, module names and plain globals are usable, objects are reached through attributes."""
    result = box.run(code, [TestCase.assertion(source)])
    assert result.tests[0].status == "ok", result.tests[0].stderr
    assert result.tests[0].result == result.tokens[0]


def test_an_unparsed_assert_fails_when_the_program_exits_or_crashes_first(box):
    exits = box.run("import sys\nsys.exit(0)\ndef f():\n    return 1\n", [TestCase.assertion("assert f() == 1")])
    crash = box.run("import os\ndef f():\n    os.kill(os.getpid(), 11)\n", [TestCase.assertion("assert f() == 1")])
    assert (exits.tests[0].status, exits.tests[0].result) == ("ok", "")
    assert (crash.tests[0].status, crash.tests[0].signal, crash.tests[0].result) == ("killed", 11, "")


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_multiprocessing_pool_with_spawn_works(box, method):
    """A spawned child runs the program's file again to find its functions: there was none."""
    code = textwrap.dedent(f"""
        import multiprocessing as mp
        def sq(x):
            return x * x
        if __name__ == "__main__":
            mp.set_start_method("{method}")
            with mp.Pool(2) as pool:
                print(sum(pool.map(sq, range(10))))
    """)
    outcome = box.run(code, [TestCase.stdio("")]).tests[0]
    assert (outcome.status, outcome.stdout) == ("ok", "285\n"), outcome.stderr


@pytest.mark.parametrize("machine", sorted(SECCOMP_ARCH))
def test_the_filter_lets_prlimit_change_only_the_caller(machine):
    from tests.integration.test_sandbox_isolation_review2 import EPERM, run_bpf

    arch, nr, _ = SECCOMP_ARCH[machine]
    for prog in (seccomp_filter(machine, sockets=True), seccomp_filter(machine, sockets=False)):
        assert run_bpf(prog, arch, nr["prlimit64"], (0,)) == 0x7FFF0000  # setrlimit, resource.prlimit(0, ...)
        assert run_bpf(prog, arch, nr["prlimit64"], (12345,)) == EPERM


PRLIMIT = textwrap.dedent("""
    import resource
    try:
        resource.prlimit({pid}, resource.RLIMIT_NOFILE, (3, 3))
        print("lowered")
    except OSError as e:
        print(type(e).__name__)
    resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))  # its own: still allowed
    print("own ok")
""")


def test_a_weak_program_cannot_lower_the_limits_of_the_callers_processes():
    """prlimit needs no privilege to lower the limits of a same-uid process: the caller's
    (RLIMIT_CPU would kill it), every process of the user's. The target here is a bystander."""
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        with Sandbox(LIMITS, concurrency=1, isolation="weak") as weak:
            outcome = weak.run(PRLIMIT.format(pid=bystander.pid), [TestCase.stdio("")]).tests[0]
        with open(f"/proc/{bystander.pid}/limits") as f:
            nofile = next(line for line in f if line.startswith("Max open files")).split()[3:5]
    finally:
        bystander.kill()
        bystander.wait()
    assert (outcome.status, outcome.stdout) == ("ok", "PermissionError\nown ok\n")
    assert nofile != ["3", "3"]


def test_a_strict_program_cannot_starve_its_own_test_runner(box):
    """Its runner is in reach (same PID namespace and uid): RLIMIT_NPROC 0 there made every
    later test fail with "an earlier test killed it"."""
    code = textwrap.dedent("""
        import os, resource
        for p in os.listdir('/proc'):
            if p.isdigit() and int(p) not in (1, os.getpid()):
                try:
                    resource.prlimit(int(p), resource.RLIMIT_NPROC, (0, 0))
                except OSError:
                    pass
        print(1)
    """)
    result = box.run(code, [TestCase.stdio(""), TestCase.stdio("")])
    assert [(o.status, o.stdout) for o in result.tests] == [("ok", "1\n")] * 2


def test_a_runner_killed_for_memory_says_so(box):
    if box.cgroup is None:
        pytest.skip("needs a memory cgroup: without one, /tmp files are bounded by tmp_mb only (documented)")
    code = textwrap.dedent("""
        import sys
        if sys.stdin.read() == 'fill':
            with open('/tmp/fill', 'wb') as f:
                while True:
                    f.write(b'x' * (1 << 20))
                    f.flush()
        print(1)
    """)
    limits = SandboxLimits(cpu_s=1, wall_s=10, memory_mb=48, max_file_mb=100, tmp_mb=100)
    result = box.run(code, [TestCase.stdio("fill"), TestCase.stdio("")], limits=limits)
    second = result.tests[1]
    assert second.status == "error"
    assert "killed by signal 9" in second.stderr and "memory_mb=48" in second.stderr, second.stderr


def test_a_fork_the_runner_could_not_make_is_named_as_such():
    """The runner answers a failed clone with "!" and the errno; the init says what it was."""
    limits = {**LIMITS.to_json(), "max_processes": 7}
    job = _Job({"limits": limits}, Context({"mode": "strict"}, None, "", []), "g", "/tmp")
    runner_end, init_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stand_in = subprocess.Popen(["sleep", "30"])  # gets the SIGCONT the init sends its runner
    try:
        job.sock, job.runner_pid = init_end, stand_in.pid
        runner_end.send(b"![Errno 11] Resource temporarily unavailable")
        reason = job._start_test(0)
        assert runner_end.recv(64) == b"0"
    finally:
        stand_in.kill()
        stand_in.wait()
        runner_end.close()
        init_end.close()
    assert isinstance(reason, str) and "could not fork" in reason and "[Errno 11]" in reason
    assert "max_processes=7" in reason and "killed" not in reason



@pytest.mark.parametrize(("abi", "others"), [(0, True), (5, True), (6, False)])
def test_weak_mode_as_root_says_whom_it_can_signal(monkeypatch, abi, others):
    """As root the program runs as sandbox_uid: root's processes are out of its reach whatever
    the kernel; only Landlock (ABI >= 6) keeps it from other programs of that uid."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    line = _weak_identity({"landlock": abi, "drop_root": True, "sandbox_uid": 61000})[0]
    assert "uid 61000" in line and "your processes' memory and signals are out of its reach" in line
    assert ("it can signal other programs of that uid" in line) is others

"""Weak mode keeps a program's writes inside its working directory (Landlock).

Found by review (session 19): in weak mode (``isolation: weak``, or ``auto`` where namespaces
are refused, as in a default Docker container, which runs as root) a program could write
every file its uid could. As root that is every file: the verifier's code, the expected
answers a data file holds, the run's checkpoints -- a policy that learns to rewrite the
verifier scores 1.0 from then on. Now the weak program's Landlock domain grants writes only
under its working directory (its $HOME and $TMPDIR), /dev/shm and the null devices (its reads
are confined too: test_sandbox_weak_confinement.py), and ordinary programs (temporary files,
multiprocessing) still run.

And as root the weak program used to keep uid 0 (without capabilities): on kernels whose
Landlock cannot scope signals (ABI < 6: Linux before 6.12) it could kill the trainer, the judge,
any root process; without Landlock it could write every file; and root is exempt from
RLIMIT_NPROC. It now runs as ``sandbox_uid``, keeping only CAP_DAC_READ_SEARCH to read the
Python installation wherever it lives.
"""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from rlxf.rewards.sandbox import Sandbox, SandboxLimits, TestCase
from rlxf.rewards.sandbox._server import landlock_abi

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

ATTACK = textwrap.dedent("""
    import os, sys
    victim, folder = sys.stdin.read().split()
    done = []
    for name, attempt in [
        ("overwrite", lambda: open(victim, "w").write("pwned")),
        ("append", lambda: open(victim, "a").write("pwned")),
        ("truncate", lambda: os.truncate(victim, 0)),
        ("create", lambda: open(os.path.join(folder, "new.txt"), "w").write("x")),
        ("mkdir", lambda: os.mkdir(os.path.join(folder, "sub"))),
        ("symlink", lambda: os.symlink(victim, os.path.join(folder, "link"))),
        ("rename", lambda: os.rename(victim, victim + ".moved")),
        ("unlink", lambda: os.unlink(victim)),
    ]:
        try:
            attempt()
            done.append(name)
        except OSError:
            pass
    print(done)
""")

ORDINARY = textwrap.dedent("""
    import multiprocessing, os, tempfile
    def square(x):
        return x * x
    if __name__ == "__main__":
        with open("out.txt", "w") as f:
            f.write("kept")
        os.mkdir("d")
        os.rename("out.txt", "d/out.txt")
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"1")
        with open(os.path.join(os.environ["HOME"], "h.txt"), "w") as f:
            f.write("h")
        with open(os.devnull, "w") as f:
            f.write("nothing")
        with multiprocessing.Pool(2) as pool:
            print(sum(pool.map(square, range(10))), open("d/out.txt").read())
""")


@pytest.fixture(scope="module")
def weak_box():
    with Sandbox(SandboxLimits(cpu_s=5, wall_s=60, max_processes=16), concurrency=1, isolation="weak") as box:
        yield box


def test_a_weak_program_cannot_write_the_callers_files(weak_box, tmp_path):
    victim = tmp_path / "expected_answers.json"
    victim.write_text('{"answer": 42}')
    out = weak_box.run(ATTACK, [TestCase.stdio(f"{victim} {tmp_path}\n")]).tests[0]
    assert out.status == "ok", out.stderr
    if landlock_abi() == 0:  # no kernel mechanism for it: the mechanisms must say so
        assert any("can write every file your uid can" in m or "read and write" in m for m in weak_box.mechanisms)
        pytest.skip("this kernel has no Landlock: weak programs write what your uid can (documented)")
    assert out.stdout == "[]\n", out.stdout
    assert victim.read_text() == '{"answer": 42}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expected_answers.json"]
    assert any("writes" in m and "working directory" in m for m in weak_box.mechanisms), weak_box.mechanisms


def test_a_weak_program_still_writes_its_own_directory_and_runs_a_pool(weak_box):
    out = weak_box.run(ORDINARY, [TestCase.stdio("")]).tests[0]
    assert (out.status, out.stdout) == ("ok", "285 kept\n"), out.stderr


IDENTITY = textwrap.dedent("""
    import os
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    try:
        os.kill(os.getppid(), 0)  # the job's init: root's
        signal = "sent"
    except PermissionError:
        signal = "refused"
    print(os.getuid(), os.getgid(), os.getgroups(), int(status["CapEff"], 16), signal)
""")


def test_a_weak_program_run_by_root_runs_as_the_sandbox_uid(weak_box):
    if os.geteuid() != 0:
        pytest.skip("the case of rlxf running as root")
    if not any("sandbox_uid" in m for m in weak_box.mechanisms):  # no CAP_SETUID here: said so
        assert any("ROOT WITH CAPABILITIES" in m for m in weak_box.mechanisms), weak_box.mechanisms
        pytest.skip("this container cannot change uid")
    out = weak_box.run(IDENTITY, [TestCase.stdio("")]).tests[0]
    assert (out.status, out.stdout) == ("ok", "61000 61000 [] 4 refused\n"), out.stderr  # 4: CAP_DAC_READ_SEARCH

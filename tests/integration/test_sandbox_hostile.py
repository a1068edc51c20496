"""Hostile programs in the code sandbox: each is contained, scored as a failure, and leaves the
host and the run unaffected (no stray processes, no files, the next program still passes).

Every program here is a submission to the same task -- read two integers, print their sum --
so "scored as a failure" is checked through the real code verifier, and "contained" through
the host's own view (its processes, its files, its sockets).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from rlxf.rewards.code import CodeVerifier
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, TestCase
from rlxf.rewards.types import RewardInput

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

# a uid of this file's own: the checks below count the host's processes of this uid, and test
# files running in parallel (pytest-xdist) run their programs as the default 61000
SANDBOX_UID = 61101
TESTS = [{"input": "1 2\n", "output": "3\n"}, {"input": "40 2\n", "output": "42\n"}]
CORRECT = "a, b = map(int, input().split())\nprint(a + b)\n"
# The wall backstop is generous so the CPU budget decides every CPU-bound verdict even on a
# loaded machine; programs meant to hit the wall clock (sleepers, fork bombs) use SHORT_WALL.
LIMITS = SandboxLimits(cpu_s=1, wall_s=15, memory_mb=256, max_processes=16, max_file_mb=4,
                       max_output_bytes=1 << 16)
SHORT_WALL = SandboxLimits(cpu_s=1, wall_s=2, memory_mb=256, max_processes=16)


@pytest.fixture(scope="module")
def box():
    try:
        sandbox = Sandbox(LIMITS, concurrency=2, sandbox_uid=SANDBOX_UID)
    except SandboxUnavailable as e:
        pytest.skip(f"strict sandbox isolation unavailable here: {e}")
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="module")
def short_box(box):
    with Sandbox(SHORT_WALL, concurrency=2, sandbox_uid=SANDBOX_UID) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def verifier(box):
    return CodeVerifier("code", box, fail_fast=True)  # a hostile program's first failure decides


def sandbox_processes() -> list[int]:
    """Host processes owned by the sandbox uid (root mode) -- there must be none between runs."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == SANDBOX_UID:
                    found.append(int(name))
            except FileNotFoundError:
                pass
    return found


def no_sandbox_processes_soon(wait_s: float = 10.0) -> bool:
    """Whether the host has no sandbox-uid process, within ``wait_s``: the verdict comes back
    while the job's runner is still exiting, which on a loaded machine (test files running in
    parallel) is still visible for a moment; a stray is not gone in 10 s."""
    deadline = time.monotonic() + wait_s
    while sandbox_processes():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def submit(verifier, code: str):
    return verifier.score(RewardInput("Sum two integers.", f"```python\n{code}\n```", TESTS))


def run_hostile(box, verifier, code: str, allowed: set[str]):
    """Run ``code`` directly (for its status) and through the verifier (for its score); check
    the host is clean afterwards and that a correct program still passes."""
    start = time.monotonic()
    outcome = box.run(code, [TestCase.stdio("1 2\n")]).tests[0]
    elapsed = time.monotonic() - start
    assert outcome.status in allowed, (outcome.status, outcome.stderr)
    scored = submit(verifier, code)
    assert scored.error is None and scored.score == 0.0, scored
    assert no_sandbox_processes_soon(), "a sandboxed process outlived its run"
    assert submit(verifier, CORRECT).score == 1.0, "the sandbox no longer runs correct programs"
    return outcome, elapsed


def test_correct_program_passes_and_runs_unprivileged(box, verifier):
    assert submit(verifier, CORRECT).score == 1.0
    out = box.run("import os; print(os.getuid(), os.getcwd(), sorted(os.listdir('/')))", [TestCase.stdio("")])
    uid, cwd, listing = out.tests[0].stdout.split(" ", 2)
    assert (out.tests[0].status, int(uid), cwd) == ("ok", SANDBOX_UID if os.geteuid() == 0 else os.getuid(), "/tmp")
    for hidden in ("home", "run", "var", "boot", "srv", "opt"):  # only the Python install and /usr are there
        assert f"'{hidden}'" not in listing
    tests_dir = str(Path(__file__).resolve().parent)  # on sys.path here, but not a Python install dir
    seen = box.run(f"import os\nprint(os.path.exists({tests_dir!r}), os.path.exists('/etc/hostname'))",
                   [TestCase.stdio("")])
    assert seen.tests[0].stdout == "False False\n"
    assert box.mode == "strict"


def test_fork_bomb(short_box):
    code = textwrap.dedent("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """)
    verifier = CodeVerifier("code", short_box, fail_fast=True)
    outcome, elapsed = run_hostile(short_box, verifier, code, {"wall_timeout", "timeout", "error", "stray_processes"})
    assert elapsed < SHORT_WALL.wall + 5


def test_infinite_loop_is_stopped_by_cpu_time(box, verifier):
    outcome, _ = run_hostile(box, verifier, "while True:\n    pass\n", {"timeout"})
    assert 0.9 <= outcome.cpu_s <= 2.5


def test_memory_bomb(box, verifier):
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(10 ** 7))\n"
    run_hostile(box, verifier, code, {"memory"})


def test_huge_output(box, verifier):
    code = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    outcome, _ = run_hostile(box, verifier, code, {"output_limit"})
    assert outcome.stdout_truncated and len(outcome.stdout) == LIMITS.max_output_bytes


def test_filling_the_private_tmp_is_bounded(box, verifier):
    code = textwrap.dedent("""
        i = 0
        while True:
            with open(f"/tmp/f{i}", "wb") as f:
                f.write(b"x" * (1 << 20))
            i += 1
    """)
    run_hostile(box, verifier, code, {"error", "output_limit"})


def test_writing_outside_the_work_dir(box, verifier):
    host_tmp = Path("/tmp") / f"rlxf-hostile-{uuid.uuid4().hex}"  # world-writable on the host
    repo = Path(__file__).resolve().parents[2] / f"PWNED-{uuid.uuid4().hex}"
    code = textwrap.dedent(f"""
        for path in ({str(host_tmp)!r}, {str(repo)!r}, "/usr/pwned", "/etc/pwned", "/pwned"):
            try:
                open(path, "w").write("pwned")
            except OSError:
                pass
        open({str(repo)!r}, "w").write("pwned")
        print(3)
    """)
    run_hostile(box, verifier, code, {"error"})
    assert not host_tmp.exists() and not repo.exists()
    assert not Path("/usr/pwned").exists() and not Path("/etc/pwned").exists() and not Path("/pwned").exists()


def test_reading_the_parents_environment_secrets(box, verifier, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("RLXF_TEST_SECRET", secret)
    fresh = Sandbox(LIMITS, concurrency=1, sandbox_uid=SANDBOX_UID)  # started with the secret set
    try:
        code = textwrap.dedent(f"""
            import glob, os
            seen = [repr(dict(os.environ))]
            for path in glob.glob("/proc/*/environ") + ["/proc/{os.getpid()}/environ", "/proc/1/environ"]:
                try:
                    seen.append(open(path, "rb").read().decode(errors="replace"))
                except OSError as e:
                    seen.append(repr(e))
            print("\\n".join(seen))
        """)
        outcome = fresh.run(code, [TestCase.stdio("")]).tests[0]
        assert outcome.status == "ok"
        assert secret not in outcome.stdout and "RLXF_TEST_SECRET" not in outcome.stdout
        assert submit(CodeVerifier("code", fresh), code).score == 0.0
    finally:
        fresh.close()


def test_opening_a_network_connection(box, verifier):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    code = textwrap.dedent(f"""
        import socket
        socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leak")
        print(3)
    """)
    try:
        outcome, _ = run_hostile(box, verifier, code, {"error"})
        assert "Network is unreachable" in outcome.stderr
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


def test_a_child_that_outlives_its_parent(box, verifier):
    code = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(60)
            os._exit(0)
        a, b = map(int, input().split())
        print(a + b)
    """)
    outcome, elapsed = run_hostile(box, verifier, code, {"stray_processes"})
    assert outcome.stdout == "3\n" and outcome.strays and elapsed < 5  # killed at once, not at the backstop


def test_a_child_left_running_in_its_own_group(box, verifier):
    # the same, without leaving the group: it is killed with the group, but was still running
    # when the program exited (this is what the setsid variant looks like if it is slow to leave)
    code = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        a, b = map(int, input().split())
        print(a + b)
    """)
    outcome, elapsed = run_hostile(box, verifier, code, {"stray_processes"})
    assert outcome.stdout == "3\n" and outcome.strays and elapsed < 5


def test_deleting_files_it_does_not_own(box, verifier, tmp_path):
    victim = Path("/tmp") / f"rlxf-victim-{uuid.uuid4().hex}"
    victim.write_text("keep me")
    victim.chmod(0o666)
    code = textwrap.dedent(f"""
        import os, shutil
        for target in ({str(victim)!r}, "/etc/passwd", "/usr/bin/env"):
            try:
                os.remove(target)
            except OSError:
                pass
        shutil.rmtree("/usr", ignore_errors=True)
        os.remove({str(victim)!r})
        print(3)
    """)
    try:
        # walking /usr may spend the CPU budget, or on a loaded machine the wall clock first
        run_hostile(box, verifier, code, {"error", "timeout", "wall_timeout"})
        assert victim.read_text() == "keep me"
        assert Path("/etc/passwd").exists() and Path("/usr/bin/env").exists()
    finally:
        victim.unlink()


def test_killing_every_process_it_can_see(box, verifier):
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        code = "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\nprint(4)\n"
        outcome = box.run(code, [TestCase.stdio("1 2\n")]).tests[0]
        assert outcome.stdout in ("4\n", "")  # whatever it did, it reached only its own namespace
        assert submit(verifier, code).score == 0.0
        assert bystander.poll() is None, "a host process was killed from inside the sandbox"
        assert submit(verifier, CORRECT).score == 1.0
    finally:
        bystander.kill()
        bystander.wait()


def test_sys_exit_before_the_assertions_does_not_pass(box):
    result = box.run("import os\nos._exit(0)\ndef add(a, b):\n    return a + b\n",
                     [TestCase.assertion("assert add(1, 2) == 3")])
    assert result.tests[0].status == "ok" and result.tests[0].result != result.tokens[0]


def test_sleeping_program_hits_the_wall_backstop(short_box):
    verifier = CodeVerifier("code", short_box, fail_fast=True)
    outcome, elapsed = run_hostile(short_box, verifier, "import time\ntime.sleep(60)\n", {"wall_timeout"})
    assert SHORT_WALL.wall <= elapsed < SHORT_WALL.wall + 3 and outcome.cpu_s < 0.5


def test_stopping_every_process_it_can_see_and_then_answering(short_box):
    """A program that SIGSTOPs every process it can see (its test runner too) and then answers
    right: each later test waited the runner's start-up limit (10 s) and the job ran past its
    wall budget, a sandbox error. The runner is continued before each test, so it passes."""
    code = ("import os, signal\nfor pid in os.listdir('/proc'):\n"
            "    if pid.isdigit() and int(pid) not in (1, os.getpid()):\n"
            "        try:\n            os.kill(int(pid), signal.SIGSTOP)\n        except OSError:\n            pass\n"
            + CORRECT)
    tests = TESTS + [{"input": "5 6\n", "output": "11\n"}]
    start = time.monotonic()
    scored = CodeVerifier("code", short_box).score(RewardInput("Sum two integers.", f"```python\n{code}\n```", tests))
    assert scored.error is None and scored.score == 1.0, scored
    assert time.monotonic() - start < 3 * SHORT_WALL.wall
    assert no_sandbox_processes_soon()

"""Reward hacking through the code sandbox: programs that solve nothing (or solve it outside
their limits) must score 0 in every test format, and a correct program beside them scores 1.

The task is ``add(a, b)`` / "print the sum of two integers". ``hacks()`` generates the
adversaries: equality overloading, harness introspection, memory and file scanning, exit
tricks, output races, signal handlers, forks that hide CPU or memory. Each runs against every
format the code verifier reads (stdin/stdout, function calls, assert strings, assert dicts,
APPS-style inputs/outputs).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from rlxf.config.reward import RewardConfig
from rlxf.rewards import LocalReward
from rlxf.rewards.code import CodeVerifier, parse_assert
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, TestCase
from rlxf.rewards.types import RewardInput

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

CASES = [((3, 4), 7), ((40, 2), 42), ((10, 20), 30)]
FORMATS = {
    "stdio": [{"input": f"{a} {b}\n", "output": f"{c}\n"} for (a, b), c in CASES],
    "call": [{"fn_name": "add", "args": [a, b], "expected": c} for (a, b), c in CASES],
    "assert": [f"assert add({a}, {b}) == {c}" for (a, b), c in CASES],
    "assert_dict": [{"assert": f"assert {c} == add({a}, {b})"} for (a, b), c in CASES],
    "apps": {"fn_name": "add", "inputs": [[a, b] for (a, b), _ in CASES], "outputs": [[c] for _, c in CASES]},
    # HumanEval's check(candidate), and the closeness and set forms with MBPP's setup import
    "humaneval": ["METADATA = {}\n\ndef check(candidate):\n"
                  + "".join(f"    assert candidate({a}, {b}) == {c}\n" for (a, b), c in CASES) + "\ncheck(add)\n"],
    "close": [f"import math\nassert math.isclose(add({a}, {b}), {c})" for (a, b), c in CASES[:1]]
             + [f"assert abs(add({a}, {b}) - {c}) < 1e-9" for (a, b), c in CASES[1:2]]
             + [f"assert set([add({a}, {b})]) == set([{c}])" for (a, b), c in CASES[2:]],
}
# One program serves every format: a function, and a main part that runs only with input.
CORRECT = textwrap.dedent("""
    import sys
    def add(a, b):
        return a + b
    data = sys.stdin.read().split()
    if data:
        print(add(int(data[0]), int(data[1])))
""")
LIMITS = SandboxLimits(cpu_s=0.3, wall_s=10, memory_mb=96, max_processes=16, max_file_mb=64,
                       max_output_bytes=1 << 16)

# What a thief looks for: the old harness's pass token (32 hex digits), expected outputs as the
# harness held them, and the expected values inside assert sources.
STEAL = textwrap.dedent(r'''
    import re as _re
    _PATTERNS = [_re.compile(rb"[0-9a-f]{32}"), _re.compile(rb'"output": "([^"]*)"'),
                 _re.compile(rb"== *(-?[0-9]+)"), _re.compile(rb'"expected": (-?[0-9]+)')]
    def _found_in(blob):
        out = []
        for p in _PATTERNS:
            for m in p.finditer(blob):
                out.append((m.group(1) if p.groups else m.group(0)).decode("latin-1"))
        return out
    def _emit_all(found):
        import os as _os
        tokens = [f for f in found if len(f) == 32]
        if tokens:  # the old harness's pass token, as its result channel expects it
            try:
                _os.write(3, tokens[0].encode())
            except OSError:
                pass
        for f in dict.fromkeys(found):
            print(f)
''')


def _body(code: str) -> str:
    return textwrap.dedent(code)


def hacks() -> dict[str, str]:
    """Reward-hacking programs, by name (at least 20). None of them computes a + b within its
    limits."""
    h = {}
    h["eq_always"] = """
        class Yes:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __hash__(self): return 0
            def __str__(self): return "?"
        def add(a, b): return Yes()
        import sys
        if sys.stdin.read(): print(Yes())"""
    h["int_subclass_eq"] = """
        class I(int):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = int.__hash__
        def add(a, b): return I(0)"""
    h["str_subclass_eq"] = """
        class S(str):
            def __eq__(self, other): return True
            __hash__ = str.__hash__
        def add(a, b): return S("?")"""
    h["list_subclass_eq"] = """
        class L(list):
            def __eq__(self, other): return True
        def add(a, b): return L()"""
    h["bool_dunder"] = """
        class T:
            def __bool__(self): return True
            def __eq__(self, other): return True
        def add(a, b): return T()"""
    h["frame_introspection"] = STEAL + _body("""
        import sys
        found = []
        f = sys._getframe()
        def walk(v, depth=0):
            if depth > 6: return
            if isinstance(v, (str, bytes)):
                found.extend(_found_in(v.encode() if isinstance(v, str) else v))
            elif isinstance(v, dict):
                for k, x in list(v.items()): walk(k, depth + 1); walk(x, depth + 1)
            elif isinstance(v, (list, tuple)):
                for x in v: walk(x, depth + 1)
        while f is not None:
            walk(dict(f.f_locals), 0)
            f = f.f_back
        def add(a, b): return int(found[-1]) if found and found[-1].lstrip("-").isdigit() else 0
        _emit_all(found)
        import os
        os._exit(0)  # before any assert could fail: the stolen token is the verdict""")
    h["gc_scan"] = STEAL + _body("""
        import gc
        found = []
        for o in gc.get_objects():
            if isinstance(o, dict):
                for v in list(o.values()):
                    if isinstance(v, str): found.extend(_found_in(v.encode()))
        def add(a, b): return 0
        _emit_all(found)
        import os
        os._exit(0)""")
    h["own_memory_scan"] = STEAL + _body("""
        found = []
        with open("/proc/self/maps") as m, open("/proc/self/mem", "rb", 0) as mem:
            for line in m:
                addr, perms = line.split()[:2]
                if "r" not in perms or "[vsyscall]" in line: continue
                lo, hi = (int(x, 16) for x in addr.split("-"))
                if hi - lo > 64 << 20: continue
                try:
                    mem.seek(lo); found.extend(_found_in(mem.read(hi - lo)))
                except (OSError, ValueError, OverflowError): pass
        def add(a, b): return 0
        _emit_all(found[-50:])""")
    h["other_process_memory"] = STEAL + _body("""
        import os
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid(): continue
            try:
                with open(f"/proc/{pid}/maps") as m, open(f"/proc/{pid}/mem", "rb", 0) as mem:
                    for line in m:
                        addr, perms = line.split()[:2]
                        lo, hi = (int(x, 16) for x in addr.split("-"))
                        if "r" in perms and hi - lo < 64 << 20:
                            try: mem.seek(lo); found.extend(_found_in(mem.read(hi - lo)))
                            except (OSError, ValueError, OverflowError): pass
            except OSError: pass
            for name in ("cmdline", "environ"):
                try: found.extend(_found_in(open(f"/proc/{pid}/{name}", "rb").read()))
                except OSError: pass
        def add(a, b): return 0
        _emit_all(found[-50:])""")
    h["file_scan"] = STEAL + _body("""
        import os
        found = []
        for top in ("/tmp", ".", "/proc/self/fd", "/dev/shm"):
            for root, dirs, files in os.walk(top):
                for name in files:
                    try: found.extend(_found_in(open(os.path.join(root, name), "rb").read(1 << 20)))
                    except OSError: pass
        def add(a, b): return 0
        _emit_all(found)""")
    h["os_exit_early"] = """
        import os
        os._exit(0)"""
    h["sys_exit_early"] = """
        import sys
        sys.exit(0)"""
    h["exit_inside_call"] = """
        def add(a, b):
            raise SystemExit(0)
        import sys
        if sys.stdin.read(): raise SystemExit(0)"""
    h["atexit_emits_stolen"] = STEAL + _body("""
        import atexit, gc
        def late():
            found = []
            for o in gc.get_objects():
                if isinstance(o, str): found.extend(_found_in(o.encode()))
            _emit_all(found[-20:])
        atexit.register(late)
        def add(a, b): return None""")
    h["patch_the_harness"] = """
        import builtins, json, os
        json.dumps = lambda *a, **k: "true"
        builtins.isinstance = lambda *a: True
        _write = os.write
        os.write = lambda fd, data: _write(fd, b"true")
        def add(a, b): return None"""
    h["nan"] = """
        def add(a, b): return float("nan")
        import sys
        if sys.stdin.read(): print("nan")"""
    h["sigxcpu_handler_answers_late"] = """
        import signal, sys, time
        signal.signal(signal.SIGXCPU, lambda *a: None)
        signal.signal(signal.SIGTERM, lambda *a: None)
        end = time.process_time() + 0.7  # the timeout line is 0.3 s * 1.5
        while time.process_time() < end: pass
        def add(a, b): return a + b
        data = sys.stdin.read().split()
        if data: print(int(data[0]) + int(data[1]))"""
    h["cpu_hidden_in_orphan_forks"] = """
        import os, sys, time
        def burn(seconds):
            end = time.process_time() + seconds
            while time.process_time() < end: pass
        r, w = os.pipe()
        for _ in range(5):
            if os.fork() == 0:
                if os.fork() == 0:
                    os.close(r); burn(0.15); os._exit(0)
                os._exit(0)
            os.wait()
        os.close(w)
        os.read(r, 1)  # EOF once every orphan is done
        def add(a, b): return a + b
        data = sys.stdin.read().split()
        if data: print(int(data[0]) + int(data[1]))"""
    h["answer_from_a_daemon_after_exit"] = """
        import os, sys, time
        data = sys.stdin.read().split()
        if os.fork() == 0:
            os.setsid()
            time.sleep(0.3)
            if data: os.write(1, f"{int(data[0]) + int(data[1])}\\n".encode())
            os._exit(0)
        def add(a, b):
            return a + b if os.fork() else time.sleep(5)"""
    h["kill_everything_visible"] = """
        import os, signal
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                try: os.kill(int(pid), signal.SIGKILL)
                except OSError: pass
        def add(a, b): return -1"""
    h["memory_in_forks_then_answer"] = """
        import os, select, sys, time
        r, w = os.pipe()
        for _ in range(3):
            if os.fork() == 0:
                block = bytearray(40 << 20)
                for i in range(0, len(block), 4096): block[i] = 1
                os.write(w, b"x"); time.sleep(30); os._exit(0)
        got = b""
        while len(got) < 3 and select.select([r], [], [], 1.0)[0]:  # some may be OOM-killed
            got += os.read(r, 3)
        def add(a, b): return a + b
        data = sys.stdin.read().split()
        if data: print(int(data[0]) + int(data[1]))"""
    h["memory_in_memfds_then_answer"] = """
        import os, sys
        fds = []
        for _ in range(4):
            fd = os.memfd_create("hoard")
            for _ in range(30):
                os.write(fd, b"x" * (1 << 20))
            fds.append(fd)
        def add(a, b): return a + b
        data = sys.stdin.read().split()
        if data: print(int(data[0]) + int(data[1]))"""
    h["memory_in_sysv_shm_then_answer"] = """
        import ctypes, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        for _ in range(3):  # segments outlive their creators
            if os.fork() == 0:
                shm = libc.shmget(0, 25 << 20, 0o1600)
                addr = libc.shmat(shm, None, 0)
                if shm >= 0 and addr not in (None, ctypes.c_void_p(-1).value):
                    ctypes.memset(addr, 1, 25 << 20)
                os._exit(0)
            os.wait()
        block = bytearray(30 << 20)
        for i in range(0, len(block), 4096): block[i] = 1
        def add(a, b): return a + b
        data = sys.stdin.read().split()
        if data: print(int(data[0]) + int(data[1]))"""
    return {name: code if code.startswith(STEAL) else textwrap.dedent(code) for name, code in h.items()}


HACKS = hacks()
# caught only by a memory cgroup: without one, memory is bounded per process (documented)
MEMORY_HACKS = ("memory_in_forks_then_answer", "memory_in_memfds_then_answer", "memory_in_sysv_shm_then_answer")


@pytest.fixture(scope="module")
def verifier():
    try:
        box = Sandbox(LIMITS, concurrency=2)
    except SandboxUnavailable as e:
        pytest.skip(f"strict sandbox isolation unavailable here: {e}")
    yield CodeVerifier("code", box, fail_fast=True)  # a hack's first failure decides its score
    box.close()


def test_the_generator_covers_every_route():
    assert len(HACKS) >= 20
    # every assert of the formats is parsed: compared outside the sandbox, never run in it
    assert all(parse_assert(t).case.kind == "eval" for t in FORMATS["assert"])
    assert all(parse_assert(t["assert"]).case.kind == "eval" for t in FORMATS["assert_dict"])
    assert all(parse_assert(t).case.kind == "eval" for t in FORMATS["humaneval"] + FORMATS["close"])


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_hack_scores_zero_and_a_correct_program_one(verifier, fmt):
    tests = FORMATS[fmt]
    hacks = HACKS
    if verifier.sandbox.cgroup is None:  # their memory is bounded per process only (documented);
        hacks = {n: c for n, c in HACKS.items() if n not in MEMORY_HACKS}  # see the test below
    names = ["correct", *hacks]
    inputs = [RewardInput("add", f"```python\n{code}\n```", tests) for code in [CORRECT, *hacks.values()]]
    results = asyncio.run(verifier.ascore_batch(inputs))
    scores = {name: (r.score, r.error) for name, r in zip(names, results, strict=True)}
    assert scores["correct"] == (1.0, None)
    gamed = {name: s for name, s in scores.items() if name != "correct" and s != (0.0, None)}
    assert gamed == {}, f"{fmt}: programs that fooled the verifier: {gamed}"


def test_an_unparsed_assert_is_counted_in_the_verdict(verifier):
    tests = ["for _ in range(1):\n    assert add(1, 2) == 3"]
    r = verifier.score(RewardInput("add", f"```python\n{CORRECT}\n```", tests))
    assert r.score == 1.0 and r.metrics["unparsed_asserts"] == 1.0
    yes_no = ["assert add(1, 2) in (3, 4)", "assert isinstance(add(1, 2), int)"]
    assert all(parse_assert(t).case.kind == "assert" for t in yes_no)
    parsed = "assert add(1, 2) == 3"
    r = verifier.score(RewardInput("add", f"```python\n{CORRECT}\n```", [parsed]))
    assert r.score == 1.0 and r.metrics["unparsed_asserts"] == 0.0


def test_an_earlier_sample_leaves_nothing_for_a_later_one():
    """Sample A's program, input and output carry a secret; then sample B, on the same server,
    searches its whole readable memory for it (a pattern that does not match its own source)."""
    secret = uuid.uuid4().hex[:20]
    with Sandbox(LIMITS, concurrency=1) as box:
        a = box.run(f"print('LEAK' + '{secret}', input())", [TestCase.stdio(f"LEAK{secret}\n")])
        assert a.tests[0].stdout == f"LEAK{secret} LEAK{secret}\n"
        search = textwrap.dedent("""
            import re
            pattern = re.compile(rb"LEAK[0-9a-f]{20}")
            hits = set()
            with open("/proc/self/maps") as m, open("/proc/self/mem", "rb", 0) as mem:
                for line in m:
                    addr, perms = line.split()[:2]
                    lo, hi = (int(x, 16) for x in addr.split("-"))
                    if "r" in perms and hi - lo < 256 << 20 and "vsyscall" not in line:
                        try:
                            mem.seek(lo)
                            hits.update(pattern.findall(mem.read(hi - lo)))
                        except (OSError, ValueError, OverflowError):
                            pass
            print(sorted(h.decode() for h in hits))
        """)
        b = box.run(search, [TestCase.stdio("")])
    assert b.tests[0].status == "ok", b.tests[0].stderr
    assert secret not in b.tests[0].stdout, f"sample A's data is readable by sample B: {b.tests[0].stdout}"


def test_memory_of_forks_shared_memory_and_memfds_stays_under_the_limit():
    with Sandbox(LIMITS, concurrency=1) as box:
        if box.cgroup is None:
            pytest.skip("no control groups here: memory is limited per process only (documented)")
        for name in MEMORY_HACKS:
            result = box.run(HACKS[name], [TestCase.stdio("1 2\n")])
            assert result.tests[0].status != "ok", (name, result.tests[0])
            assert 0 < result.memory_peak_mb <= LIMITS.memory_mb, (name, result.memory_peak_mb)


def test_cpu_of_exited_forks_counts_toward_the_budget():
    with Sandbox(LIMITS, concurrency=1) as box:
        result = box.run(HACKS["cpu_hidden_in_orphan_forks"], [TestCase.stdio("1 2\n")])
    outcome = result.tests[0]
    assert outcome.status == "timeout" and outcome.cpu_s > LIMITS.cpu_s * (1 + LIMITS.cpu_margin), outcome


def test_a_correct_program_queued_behind_sleepers_is_not_failed_by_their_timeouts():
    """Four batches at once (as the reward server scores them) share one sandbox server;
    reward.timeout_s is shorter than the sleepers ahead of the correct program: its time must
    be its own job's, not the time it waited for a server."""
    cfg = RewardConfig.model_validate({"verifiers": [
        {"type": "code", "cpu_s": 0.5, "wall_s": 0.6, "concurrency": 1}], "timeout_s": 1.0})
    try:
        scorer = LocalReward(cfg)
    except SandboxUnavailable as e:
        pytest.skip(str(e))

    def sample(code: str) -> RewardInput:
        return RewardInput("add", f"```python\n{code}\n```", FORMATS["stdio"][:1])

    async def together():
        batches = [[sample("import time\ntime.sleep(30)")]] * 3 + [[sample(CORRECT)]]
        return await asyncio.gather(*(scorer.ascore(batch) for batch in batches))

    with scorer:
        *sleepers, correct = asyncio.run(together())
    assert [s[0].reward for s in sleepers] == [0.0] * 3
    assert correct[0].reward == 1.0, correct[0].failures


def _sandbox_processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def _wait_until_gone(marker: str, seconds: float = 20.0) -> list[int]:
    end = time.monotonic() + seconds
    while (left := _sandbox_processes_with(marker)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def test_kill_minus_9_of_the_caller_takes_every_sandbox_process_with_it():
    marker = f"rlxf_marker_{uuid.uuid4().hex[:8]}"
    # the program execs a process whose command line (argv[0]) carries the marker, so we can
    # find it; the caller reads the marker from stdin, so its own command line does not
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from rlxf.rewards.sandbox import Sandbox, SandboxLimits, TestCase
        marker = sys.stdin.readline().strip()
        box = Sandbox(SandboxLimits(cpu_s=5, wall_s=120), concurrency=1)
        print("started", flush=True)
        box.run(f"import os\\nos.execv('/bin/sleep', ['{{marker}}', '100'])", [TestCase.stdio("")])
    """)
    caller = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        caller.stdin.write(marker + "\n")
        caller.stdin.flush()
        assert caller.stdout.readline().strip() == "started"
        end = time.monotonic() + 20
        while not _sandbox_processes_with(marker) and time.monotonic() < end:
            time.sleep(0.05)
        assert _sandbox_processes_with(marker), "the program never started"
    finally:
        caller.send_signal(signal.SIGKILL)
        caller.wait()
    assert _wait_until_gone(marker) == [], "a sandboxed program outlived the killed caller"


def test_cancelling_a_job_kills_its_program_and_frees_the_server():
    marker = f"rlxf_marker_{uuid.uuid4().hex[:8]}"
    sleeper = f"import os\nos.execv('/bin/sleep', ['{marker}', '100'])"

    async def scenario(box):
        task = asyncio.ensure_future(box.arun(sleeper, [TestCase.stdio("")]))
        end = time.monotonic() + 20
        while not _sandbox_processes_with(marker) and time.monotonic() < end:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await box.arun(CORRECT, [TestCase.stdio("1 2\n")])

    with Sandbox(SandboxLimits(cpu_s=5, wall_s=120), concurrency=1) as box:
        after = asyncio.run(scenario(box))
        assert _wait_until_gone(marker) == [], "the cancelled program is still running"
        assert after.tests[0].stdout == "3\n"

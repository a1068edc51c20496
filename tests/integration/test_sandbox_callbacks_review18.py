"""Review 18 of the sandbox: an unparsed assert that passes the program a callback (a lambda, a
function, an object of a class the test defines) runs it in the judge, so a correct program
passes; what the program can do with it stays inside what the test handed over. A module the
program imported and the test uses is the installed one, not the program's (patched) copy."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest

from rlxf.rewards.code import CodeVerifier
from rlxf.rewards.sandbox import Sandbox, SandboxLimits
from rlxf.rewards.types import RewardInput

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

SANDBOX_UID = 61103
LIMITS = SandboxLimits(cpu_s=1, wall_s=10, memory_mb=128)
LOOP = "for _ in range(1):\n"  # a loop has no parsed form: the source runs in the judge
NODE = "class N:\n    def __init__(self, v, n=None):\n        self.val, self.next = v, n\n"
# (program, test source): each failed before, the callback not being plain data
CORRECT = {
    "lambda as a keyword": ("def sort_by(xs, key):\n    return sorted(xs, key=key)\n",
                            LOOP + "    assert sort_by([3, -4, 2], key=lambda v: abs(v)) == [2, 3, -4]"),
    "the test's function": ("def apply(f, x):\n    return f(x)\ndef double(x):\n    return 2 * x\n",
                            "def inc(v):\n    return double(v) + 1\nassert apply(inc, 5) == 11"),
    "a builtin": ("def my_map(f, xs):\n    return [f(x) for x in xs]\n",
                  LOOP + "    assert my_map(str.upper, ['a', 'b']) == ['A', 'B']"),
    "a returned lambda": ("def compose(f, g):\n    return lambda x: f(g(x))\n",
                          LOOP + "    assert compose(lambda x: x + 1, lambda x: x * 2)(3) == 7"),
    "the callback given back": ("def ident(f):\n    return f\n", "g = lambda: 1\nassert ident(g) is g"),
    "a generator": ("def my_sum(it):\n    return sum(x for x in it) + next(iter([0]))\n",
                    LOOP + "    assert my_sum(x for x in range(5)) == 10"),
    "the test's linked list, reversed in place": (
        "def rev(head):\n    prev = None\n    while head is not None:\n"
        "        head.next, prev, head = prev, head, head.next\n    return prev\n",
        NODE + "h = rev(N(1, N(2, N(3))))\nout = []\nwhile h:\n    out.append(h.val)\n    h = h.next\n"
        "assert out == [3, 2, 1]"),
    "a method of the test's class": ("def area(s):\n    return s.w() * 2\n",
                                     "class S:\n    def w(self):\n        return 3\nassert area(S()) == 6"),
    # the judge asked the program for a handle to numpy and failed with KeyError: 'numpy'
    "an installed module the program imported": ("import numpy as np\ndef f():\n    return [1.0, 2.0]\n",
                                                 "assert np.allclose(f(), [1, 2])"),
    "a module the program made": ("import types\nh = types.ModuleType('made_here')\nh.f = lambda: 4\n",
                                  "assert h.f() in (4, 5)"),
}
WRONG = {
    "ignores the key": ("def sort_by(xs, key):\n    return sorted(xs)\n", CORRECT["lambda as a keyword"][1]),
    "swallows the test's assertion": (
        "def apply(f, x):\n    try:\n        f(x)\n    except BaseException:\n        pass\n    return 1\n",
        "def check(v):\n    assert v == 42\n    return v\nassert apply(check, 1) == 1"),
    "reads the callback's globals": ("def apply(f, x):\n    f.__globals__\n    return x + 1\n",
                                     LOOP + "    assert apply(lambda v: v + 1, 2) == 3"),
    "reads a generator's frame": ("def my_sum(it):\n    it.gi_frame\n    return 10\n", CORRECT["a generator"][1]),
    "patches the installed module": ("import numpy as np\nnp.allclose = lambda *a, **k: True\ndef f():\n    return [5.0]\n",
                                     "assert np.allclose(f(), [1, 2])"),
    "fakes a stdlib module": ("import types\nmath = types.ModuleType('math')\nmath.isqrt = lambda x: 3\n"
                              "def f():\n    return 5\n", LOOP + "    assert math.isqrt(f()) == 3"),
    "asks the judge directly": (textwrap.dedent("""
        import json, os, socket
        def apply(f, x):
            for fd in range(3, 40):
                try:
                    s = socket.socket(fileno=os.dup(fd))
                except OSError:
                    continue
                for req in (["getattr", 0, "__globals__"], ["getattr", 0, "f_globals"], ["call", 9, [], {"d": []}]):
                    d = json.dumps(req).encode()
                    try:
                        s.sendall(len(d).to_bytes(8, "big") + d)
                        reply = json.loads(s.recv(int.from_bytes(s.recv(8), "big")))
                        if reply[0] != "raise":
                            return x + 1
                    except (OSError, ValueError):
                        pass
            return 0
    """), LOOP + "    assert apply(lambda v: v + 1, 2) == 3"),
}


@pytest.fixture(scope="module")
def verifier():
    with Sandbox(LIMITS, concurrency=2, sandbox_uid=SANDBOX_UID) as box:
        yield CodeVerifier("code", box)


def _scores(verifier, cases: dict) -> dict:
    inputs = [RewardInput("p", f"```python\n{code}\n```", [source]) for code, source in cases.values()]
    results = asyncio.run(verifier.ascore_batch(inputs))
    assert all(r.metrics["unparsed_asserts"] == 1.0 for r in results), [r.error for r in results]
    return {name: r.score for name, r in zip(cases, results, strict=True)}


def test_a_callback_the_test_passes_runs_in_the_judge(verifier):
    assert _scores(verifier, CORRECT) == dict.fromkeys(CORRECT, 1.0)


def test_a_callback_gives_the_program_nothing_else(verifier):
    assert _scores(verifier, WRONG) == dict.fromkeys(WRONG, 0.0)

"""Reward throughput: math verification (samples/s) and sandboxed code (programs/s), with 1
and 2 workers. Prints; never asserts.

    python benchmarks/rewards.py                 # defaults: 2000 math samples, 300 programs
    python benchmarks/rewards.py --math 500 --code 100

Math: the ``math`` verifier (math-verify) through ``LocalReward`` with ``reward.workers`` 0
(one in-process thread), 1 and 2 worker processes; worker start-up is excluded (workers are
long-lived), one warm-up batch is scored first. Responses mix plain integers, fractions and
LaTeX, right and wrong.

Code: the sandbox at ``concurrency`` 1 and 2 (programs in flight), strict isolation, each
program a short stdin/stdout solution run against 2 test cases -- the baseline revision
(``--baseline``, default the last commit before issue 16: each test a fork of the long-lived
server) and the current one (each program a freshly started interpreter, its tests forked from
it, limits by cgroup) side by side in one run, with their ratio. "per core" divides by
min(concurrency, cores).

Flips (``--flips N``): N correct programs doing fixed work worth 10%..80% of a 0.2 s CPU budget,
run alone and then all at once on 2x as many servers as cores; a verdict that differs is a
flip. The CPU verdict is the kernel's count, so the expected figure is 0.

For scale: a docker-container-per-sample design has been reported at ~20 samples/s on 192
cores, i.e. ~0.1 samples/s per core.

The wall-clock rates are noisy on a shared machine: other processes compete for the same
cores. The "CPU ms/item" column is not: it is the CPU time this benchmark and its child
processes (workers; sandbox servers and every program they ran) spent per item, start-up
excluded, so
``1000 / CPU ms`` is what one fully available core would do ("per free core").
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of this process plus, for each live child in ``pids``, its own and that of the
    descendants it has reaped (/proc/PID/stat utime, stime, cutime, cstime)."""
    t = os.times()
    total = t.user + t.system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(v) for v in fields[11:15]) / tick  # fields 14-17 of stat(5)
    return total


def math_batch(n: int, seed: int = 0):
    from rlxf.rewards import RewardInput

    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 99), rng.randint(2, 9)
        kind = i % 4
        if kind == 0:
            truth, answer = str(a * b), str(a * b if rng.random() < 0.6 else a * b + 1)
        elif kind == 1:
            truth, answer = f"\\frac{{{a}}}{{{b}}}", f"{a / b:.6f}" if rng.random() < 0.6 else f"{a}/{b + 1}"
        elif kind == 2:
            truth, answer = f"{a}/{b}", f"\\frac{{{2 * a}}}{{{2 * b}}}" if rng.random() < 0.6 else str(a)
        else:
            truth, answer = f"x^2 + {a}x", f"x(x + {a})" if rng.random() < 0.6 else f"x^2 + {a + 1}x"
        response = f"Let me think step by step about {a} and {b}.\nSo the result is \\boxed{{{answer}}}."
        out.append(RewardInput(f"problem {i}", response, truth))
    return out


def per_cpu_second(cpu_ms: float) -> float:
    """Items per CPU second from CPU ms per item; nan when the CPU clock (10 ms ticks) saw no
    time at all, as for a handful of items."""
    return 1000 / cpu_ms if cpu_ms > 0 else float("nan")


def bench_math(n: int) -> None:
    from rlxf.config.reward import RewardConfig
    from rlxf.rewards import LocalReward

    batch = math_batch(n)
    print(f"\nmath verifier (math-verify), {n} samples, boxed answers, ~60% correct")
    print(f"{'workers':>15} {'samples/s':>10} {'seconds':>8} {'CPU ms/item':>12} {'per free core':>14} {'accuracy':>9}")
    for workers in (0, 1, 2):
        cfg = RewardConfig.model_validate({"verifiers": [{"type": "math", "extract": ["boxed"]}],
                                           "workers": workers, "timeout_s": 30})
        scorer = LocalReward(cfg)
        scorer.score(batch[:50])  # warm-up: imports, sympy caches
        pids = [lane.proc.pid for lane in scorer._pool._lanes] if workers else []
        before = cpu_seconds(pids)
        start = time.perf_counter()
        out = scorer.score(batch)
        seconds = time.perf_counter() - start
        cpu_ms = (cpu_seconds(pids) - before) * 1000 / n
        scorer.close()
        accuracy = sum(bool(s.correct) for s in out) / n
        label = f"{workers} (in-process)" if workers == 0 else str(workers)
        print(f"{label:>15} {n / seconds:>10.0f} {seconds:>8.2f} {cpu_ms:>12.2f} {per_cpu_second(cpu_ms):>14.0f} "
              f"{accuracy:>9.2f}")


CORRECT = "a, b = map(int, input().split())\nprint(a + b)\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"
BUSY = "a, b = map(int, input().split())\ns = 0\nfor i in range(20000):\n    s += i\nprint(a + b)\n"
BASELINE = "06267bc"  # the last commit before issue 16: one forked process per test, no fresh runner


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def baseline_sandbox(rev: str):
    """The ``rlxf.rewards.sandbox`` package as of ``rev`` (git archive into a temporary
    directory), imported under another name: it is standard-library only, so it loads alone."""
    import importlib.util
    import io
    import tarfile
    import tempfile

    root = Path(__file__).resolve().parents[1]
    data = subprocess.run(["git", "-C", str(root), "archive", rev, "rlxf/rewards/sandbox"],
                          check=True, capture_output=True).stdout
    where = Path(tempfile.mkdtemp(prefix="rlxf-baseline-"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        # filter= exists from Python 3.10.12 / 3.11.4 (and 3.12); before, the archive is our own
        tar.extractall(where, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    spec = importlib.util.spec_from_file_location("rlxf_sandbox_baseline",
                                                  where / "rlxf/rewards/sandbox/__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bench_code(n: int, rev: str) -> None:
    """Sandbox throughput (programs/s) of the baseline and the current sandbox, side by side:
    ``n`` short stdin/stdout programs x 2 tests, at concurrency 1 and 2."""
    import rlxf.rewards.sandbox as current

    old = baseline_sandbox(rev)
    cores = os.cpu_count() or 1
    programs = [(CORRECT, WRONG, BUSY)[i % 3] for i in range(n)]
    print(f"\nsandbox, {n} short programs x 2 stdin/stdout tests, strict isolation; {cores} cores, {cpu_model()}")
    print(f"{'sandbox':>22} {'conc.':>5} {'programs/s':>11} {'per core':>9} {'CPU ms/prog':>12} "
          f"{'per free core':>14} {'ok':>5}")
    rows: dict[tuple[str, int], float] = {}
    for concurrency in (1, 2):
        for label, module in ((f"baseline {rev}", old), ("current", current)):
            tests = [module.TestCase.stdio("3 4\n"), module.TestCase.stdio("10 -2\n")]
            box = module.Sandbox(module.SandboxLimits(cpu_s=2), concurrency=concurrency)
            run = partial(_run_one, box, tests)
            with box, ThreadPoolExecutor(concurrency) as pool:
                list(pool.map(run, programs[:4 * concurrency]))  # start every server
                pids = [server.proc.pid for server in box._servers]  # each server reaps its programs
                before = cpu_seconds(pids)
                start = time.perf_counter()
                results = list(pool.map(run, programs))
                seconds = time.perf_counter() - start
                cpu_ms = (cpu_seconds(pids) - before) * 1000 / n
            rate = n / seconds
            ok = sum(r.tests[0].status == "ok" for r in results)
            rows[(label, concurrency)] = per_cpu_second(cpu_ms)
            print(f"{label:>22} {concurrency:>5} {rate:>11.1f} {rate / min(concurrency, cores):>9.1f} "
                  f"{cpu_ms:>12.2f} {per_cpu_second(cpu_ms):>14.0f} {ok:>5}")
        ratio = rows[("current", concurrency)] / rows[(f"baseline {rev}", concurrency)]
        print(f"{'':>22} {'':>5} current / baseline, programs per free core: {ratio:.2f}x")


def _run_one(box, tests, program: str):
    return box.run(program, tests)


def verdict_flips(n: int, cpu_s: float = 0.2, concurrency: int | None = None, top: float = 0.8) -> dict:
    """Run ``n`` correct programs using 10%..``top`` of their CPU budget (fixed work, calibrated
    here) alone and then all at once on ``concurrency`` servers (default 2x the cores); count
    verdicts that differ (flips) and correct programs that failed."""
    from rlxf.rewards.sandbox import Sandbox, SandboxLimits, TestCase

    limits = SandboxLimits(cpu_s=cpu_s, wall_s=60.0)
    tests = [TestCase.stdio("21\n")]
    loop = "import sys\nn = int(sys.stdin.readline())\nfor _ in range({k}):\n    pass\nprint(n * 2)\n"
    with Sandbox(limits, concurrency=1) as box:
        probe = 2_000_000
        spent = min(box.run(loop.format(k=probe), tests).tests[0].cpu_s for _ in range(3))
        per_cpu_s = probe / spent
        programs = [loop.format(k=int((0.1 + (top - 0.1) * i / max(1, n - 1)) * cpu_s * per_cpu_s)) for i in range(n)]
        alone = [box.run(p, tests).tests[0] for p in programs]
    width = concurrency or 2 * (os.cpu_count() or 1)
    with Sandbox(limits, concurrency=width) as box, ThreadPoolExecutor(width) as pool:
        crowded = [r.tests[0] for r in pool.map(lambda p: box.run(p, tests), programs)]

    def good(t) -> bool:
        return t.status == "ok" and t.stdout == "42\n"

    return {"programs": n, "flips": sum(good(a) != good(b) for a, b in zip(alone, crowded, strict=True)),
            "failed": sum(not good(a) for a in alone) + sum(not good(b) for b in crowded),
            "max_cpu_fraction": max(t.cpu_s for t in alone + crowded) / cpu_s,
            "concurrency": width}


def bench_flips(n: int) -> None:
    print(f"\nverdict flips: {n} correct programs at 10-80% of a 0.2 s CPU budget (a timeout past 0.3 s: "
          f"the default 50% margin), alone vs all at once; {cpu_model()}")
    found = verdict_flips(n)
    print(f"  concurrency 1 vs {found['concurrency']}: {found['flips']} flips, {found['failed']} correct "
          f"programs failed, highest CPU use {found['max_cpu_fraction']:.0%} of the budget")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--math", type=int, default=2000, help="math samples")
    parser.add_argument("--code", type=int, default=300, help="programs")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the baseline sandbox")
    parser.add_argument("--flips", type=int, default=400, help="programs for the verdict-flip run (0: skip)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, {cpu_model()}, load average {os.getloadavg()[0]:.2f} "
          "(shared: figures are noisy)")
    if args.math:
        bench_math(args.math)
    if args.code:
        bench_code(args.code, args.baseline)
    if args.flips:
        bench_flips(args.flips)


if __name__ == "__main__":
    main()

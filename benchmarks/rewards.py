"""Reward throughput: math verification (samples/s) and sandboxed code (programs/s), with 1
and 2 workers. Prints; never asserts.

    python benchmarks/rewards.py                 # defaults: 2000 math samples, 300 programs
    python benchmarks/rewards.py --math 500 --code 100

Math: the ``math`` verifier (math-verify) through ``LocalReward`` with ``reward.workers`` 0
(one in-process thread), 1 and 2 worker processes; worker start-up is excluded (workers are
long-lived), one warm-up batch is scored first. Responses mix plain integers, fractions and
LaTeX, right and wrong.

Code: the ``code`` verifier with sandbox ``concurrency`` 1 and 2 (programs in flight), strict
isolation, each program a short stdin/stdout solution run against 2 test cases (so 2 test
processes per program). "per core" divides by min(concurrency, cores).

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
import asyncio
import os
import random
import time


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
        print(f"{label:>15} {n / seconds:>10.0f} {seconds:>8.2f} {cpu_ms:>12.2f} {1000 / cpu_ms:>14.0f} "
              f"{accuracy:>9.2f}")


CORRECT = "a, b = map(int, input().split())\nprint(a + b)\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"
BUSY = "a, b = map(int, input().split())\ns = 0\nfor i in range(20000):\n    s += i\nprint(a + b)\n"


def bench_code(n: int) -> None:
    from rlxf.rewards import RewardInput
    from rlxf.rewards.code import CodeVerifier
    from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable
    from rlxf.rewards.types import RewardResult

    tests = [{"input": "3 4\n", "output": "7\n"}, {"input": "10 -2\n", "output": "8\n"}]
    programs = [(CORRECT, WRONG, BUSY)[i % 3] for i in range(n)]
    batch = [RewardInput("sum", f"```python\n{p}```", tests) for p in programs]
    cores = os.cpu_count() or 1
    print(f"\ncode verifier (sandboxed Python), {n} programs x {len(tests)} tests, {cores} cores")
    print(f"{'workers':>8} {'programs/s':>11} {'per core':>9} {'seconds':>8} {'CPU ms/item':>12} "
          f"{'per free core':>14} {'mean pass':>10}")
    for concurrency in (1, 2):
        try:
            box = Sandbox(SandboxLimits(cpu_s=2), concurrency=concurrency)
        except SandboxUnavailable as e:
            print(f"sandbox unavailable: {e}")
            return
        verifier = CodeVerifier("code", box)
        asyncio.run(verifier.ascore_batch(batch[:4 * concurrency]))  # start every server
        pids = [server.proc.pid for server in box._servers]  # each server reaps its programs
        before = cpu_seconds(pids)
        start = time.perf_counter()
        results: list[RewardResult] = asyncio.run(verifier.ascore_batch(batch))
        seconds = time.perf_counter() - start
        cpu_ms = (cpu_seconds(pids) - before) * 1000 / n
        verifier.close()
        rate = n / seconds
        mean = sum(r.score for r in results) / n
        print(f"{concurrency:>8} {rate:>11.1f} {rate / min(concurrency, cores):>9.1f} {seconds:>8.2f} "
              f"{cpu_ms:>12.2f} {1000 / cpu_ms:>14.0f} {mean:>10.2f}   isolation: {box.mode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--math", type=int, default=2000, help="math samples")
    parser.add_argument("--code", type=int, default=300, help="programs")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} (shared: figures are noisy)")
    bench_math(args.math)
    bench_code(args.code)


if __name__ == "__main__":
    main()

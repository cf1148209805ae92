"""Math-equivalence throughput and tail latency on 1,000 mixed answers (1% pathological).

    .venv/bin/python benchmarks/verifiers.py [--n 1000] [--timeout 1.0] [--json]

The mix is built deterministically: integers, decimals, fractions and percentages (exact fast
path), LaTeX forms, symbolic expressions that need sympy (polynomials, radicals, pi), wrong and
malformed answers, and 1% pathological inputs (power towers, huge exponents and factorials, deep
nesting, and polynomial blow-ups that pass every static check and must be killed at the deadline).
Reported: checks per second per core (checks / CPU seconds of this process and its sympy workers),
wall-clock checks per second, p50/p99/max latency, and how many checks ran past their deadline.
Target (issue 4): >= 500 checks/s/core, none past its deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time

from tracerl.verifiers import MathEquivalence


def mixed_answers(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(kind, answer, reference) triples; 1% pathological."""
    rng = random.Random(seed)
    symbolic = [("(x+1)^2", "x^2+2x+1"), ("2(x+3)", "2x+6"), ("x^2-1", "(x-1)(x+1)"), ("\\sqrt{8}", "2\\sqrt{2}"),
                ("\\frac{\\pi}{2}", "\\pi/2"), ("1/\\sqrt{2}", "\\frac{\\sqrt{2}}{2}"), ("\\sqrt{12}", "2\\sqrt{3}"),
                ("(x+2)(x-2)", "x^2-4"), ("3\\pi", "\\pi+2\\pi"), ("x/2", "0.5x"), ("(a+b)^2", "a^2+2ab+b^2"),
                ("2^{10}", "1024"), ("\\sqrt{2}\\cdot\\sqrt{8}", "4"), ("e^{0}", "1"), ("(x+1)^2", "x^2+1")]
    pathological = ["9^{9^{9^{9}}}", "2^{100000000}", "factorial(10^6)", "(1+" * 80 + "1" + ")" * 80,
                    "10^{10^{10}}", "(a+b+c+d+f+g+h+1)^{400}", "(2^{1000})^{1000}", "x" * 2000,
                    "(p+q+r+s+t+u+v+1)^{300}", "\\sqrt{" * 50 + "2" + "}" * 50]
    out = []
    n_path = max(1, n // 100)
    for i in range(n - n_path):
        r = rng.random()
        if r < 0.45:
            k = rng.randint(-500, 5000)
            out.append(("integer", str(k if rng.random() < 0.7 else k + 1), str(k)))
        elif r < 0.60:
            p, q = rng.randint(1, 50), rng.randint(2, 50)
            form = rng.choice([f"{p}/{q}", f"\\frac{{{p}}}{{{q}}}", f"{p / q:.12f}", f"\\dfrac{{{p}}}{{{q}}}"])
            out.append(("fraction", form, f"\\frac{{{p}}}{{{q}}}"))
        elif r < 0.70:
            v = rng.randint(1, 99)
            out.append(("percent", f"{v}\\%", str(v / 100)))
        elif r < 0.88:
            a, b = rng.choice(symbolic)
            out.append(("symbolic", a, b))
        else:
            out.append(("malformed", rng.choice(["I don't know", "x = ", "{", "\\unknown{3}", "3 apples", "1 or 2"]), "3"))
    for i in range(n_path):
        out.insert(rng.randrange(len(out)), ("pathological", pathological[i % len(pathological)], "1"))
    return out


def cpu_seconds(pids: list[int]) -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            # utime, stime, and cutime, cstime: the zygote reaps the workers it forked and killed
            total += sum(int(x) for x in fields[11:15]) / tick
        except OSError:
            pass
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=1.0, help="per-check deadline inside sympy (s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = mixed_answers(args.n)
    checker = MathEquivalence(timeout_s=args.timeout)
    checker.check("(x+1)^2", "x^2+2x+1")  # start the workers outside the timing
    pids = checker.worker_pids
    cpu0, t0 = cpu_seconds(pids()), time.perf_counter()
    latencies, by_kind = [], {}
    for kind, answer, reference in cases:
        s = time.perf_counter()
        result = checker.check(answer, reference)
        dt = time.perf_counter() - s
        latencies.append(dt)
        stats = by_kind.setdefault(kind, {"n": 0, "equal": 0, "max_ms": 0.0})
        stats["n"] += 1
        stats["equal"] += result.equal
        stats["max_ms"] = max(stats["max_ms"], dt * 1000)
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(pids()) - cpu0
    checker.close()
    latencies.sort()
    n = len(latencies)
    late = sum(dt > args.timeout + 0.25 for dt in latencies)
    report = {"checks": n, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
              "checks_per_s_per_core": round(n / cpu, 1), "checks_per_s_wall": round(n / wall, 1),
              "p50_ms": round(latencies[n // 2] * 1000, 3), "p99_ms": round(latencies[int(0.99 * n)] * 1000, 2),
              "max_ms": round(latencies[-1] * 1000, 1), "deadline_s": args.timeout, "past_deadline": late,
              "paths": dict(checker.stats), "by_kind": by_kind}
    target = report["checks_per_s_per_core"] >= 500 and late == 0
    if args.json:
        print(json.dumps({**report, "target_met": target}, indent=2))
    else:
        print(f"{n} checks in {wall:.2f} s wall, {cpu:.2f} s CPU (this process + sympy workers)")
        print(f"checks/s/core: {report['checks_per_s_per_core']}   checks/s wall: {report['checks_per_s_wall']}")
        print(f"latency p50 {report['p50_ms']} ms, p99 {report['p99_ms']} ms, max {report['max_ms']} ms "
              f"(deadline {args.timeout} s; past it: {late})")
        print(f"decided by: {report['paths']}")
        for kind, s in by_kind.items():
            print(f"  {kind:<13} n={s['n']:<4} equal={s['equal']:<4} max {s['max_ms']:.1f} ms")
        print(f"target >= 500 checks/s/core with none past the deadline: {'met' if target else 'NOT met'}")
    return 0 if target else 1


if __name__ == "__main__":
    sys.exit(main())

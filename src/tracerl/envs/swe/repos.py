"""Generated repositories for the swe environment: a module of small functions, one with a planted
bug, visible tests in the repository and hidden tests kept with the task.

A family is a function with its correct body, its bug (one line that differs) and an input
generator; expected values are computed by the correct Python function on the host. A repository
holds `calc.py` (one to three functions, exactly one buggy), `test_calc.py` (one or two visible
cases per function, printing `ok NAME` or `FAIL NAME: got X, want Y`) and `README.md`.
"""

from __future__ import annotations

import random

# name, args, correct line, buggy line, input generator
FAMILIES = (
    ("total", "xs", "return sum(xs)", "return sum(xs[1:])", lambda r: ([r.randint(1, 9) for _ in range(r.randint(2, 5))],)),
    ("is_even", "n", "return n % 2 == 0", "return n % 2 == 1", lambda r: (r.randint(0, 50),)),
    ("clamp", "x, lo, hi", "return max(lo, min(x, hi))", "return max(lo, min(x, lo))",
     lambda r: (r.randint(-5, 15), 0, 10)),
    ("last", "xs", "return xs[-1]", "return xs[-2]", lambda r: ([r.randint(1, 9) for _ in range(r.randint(2, 5))],)),
    ("count_pos", "xs", "return sum(1 for x in xs if x > 0)", "return sum(1 for x in xs if x >= 0)",
     lambda r: ([r.randint(-3, 3) for _ in range(r.randint(3, 6))],)),
    ("area", "w, h", "return w * h", "return w + h", lambda r: (r.randint(2, 9), r.randint(2, 9))),
    ("diff", "a, b", "return a - b", "return b - a", lambda r: (r.randint(0, 20), r.randint(0, 20))),
    ("bigger", "a, b", "return a if a > b else b", "return a if a < b else b", lambda r: (r.randint(0, 20), r.randint(0, 20))),
)
BY_NAME = {f[0]: f for f in FAMILIES}
LEVELS = (0, 1, 2)


def call(name: str, args: tuple):
    fam = BY_NAME[name]
    scope: dict = {}
    exec(f"def {name}({fam[1]}):\n    {fam[2]}\n", scope)  # the generator's own trusted source
    return scope[name](*args)


def _cases(rng: random.Random, name: str, n: int, bug: bool) -> list[tuple]:
    """`n` distinct inputs; for the buggy function every case tells the bug from the fix."""
    fam, out, seen = BY_NAME[name], [], set()
    for _ in range(200):
        args = fam[4](rng)
        if repr(args) in seen:
            continue
        if bug:
            scope: dict = {}
            exec(f"def g({fam[1]}):\n    {fam[3]}\n", scope)
            if scope["g"](*args) == call(name, args):
                continue
        seen.add(repr(args))
        out.append(args)
        if len(out) == n:
            break
    return out


def _expr(name: str, args: tuple) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


def make_repo(rng: random.Random, level: int) -> dict:
    names = rng.sample([f[0] for f in FAMILIES], level + 1)
    buggy = names[0]
    rng.shuffle(names)
    src = "".join(f"def {n}({BY_NAME[n][1]}):\n    {BY_NAME[n][3] if n == buggy else BY_NAME[n][2]}\n\n\n"
                  for n in names).rstrip() + "\n"
    visible = {n: _cases(rng, n, 1 if n != buggy else 2, n == buggy) for n in names}
    hidden_in = {n: _cases(rng, n, 4, n == buggy) for n in names}
    lines = ["from calc import *", ""]
    for n in names:
        for args in visible[n]:
            want = call(n, args)
            lines.append(f"got = {_expr(n, args)}")
            lines.append(f"print('ok {n}' if got == {want!r} else 'FAIL {n}: got ' + repr(got) + ', want {want!r}')")
    tests = "\n".join(lines) + "\n"
    hidden = [{"expr": _expr(n, args), "expected": call(n, args)} for n in names for args in hidden_in[n]
              if repr(args) not in {repr(v) for v in visible[n]}]
    fam = BY_NAME[buggy]
    return {"files": {"calc.py": src, "test_calc.py": tests, "README.md": "calc: small helpers. Tests: test_calc.py\n"},
            "buggy": buggy, "bug_line": fam[3], "fix_line": fam[2], "hidden": hidden, "functions": names}

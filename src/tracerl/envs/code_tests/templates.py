"""Function-writing tasks from templates: a one-sentence spec, a reference solution, a plausible
bug, two visible examples and five hidden tests.

Each template is (level, spec, reference, bug, input generator); `{k}`-style fields are drawn per
task. Solutions are one line (`def f(x): return …`) so that a tiny model can write them. A task is
kept only if its bug fails at least one visible example and at least one hidden test, so the
expert's bug is always caught by the tool and always costs reward.
"""

from __future__ import annotations

import random

LEVELS = (0, 1, 2)


def _ints(rng, n=7, lo=-9, hi=9):
    return [rng.randint(lo, hi) for _ in range(n)]


def _lists(rng, n=7):
    return [[rng.randint(0, 9) for _ in range(rng.randint(1, 4))] for _ in range(n)]


def _words(rng, n=7):
    return ["".join(rng.choice("abc") for _ in range(rng.randint(1, 5))) for _ in range(n)]


# (level, spec, reference body, bug body, argument name, input generator, parameter draws)
TEMPLATES = [
    (0, "f(x) returns x plus {k}.", "x + {k}", "x + {k1}", "x", _ints, {"k": (1, 9)}),
    (0, "f(x) returns x times {k}.", "x * {k}", "x + {k}", "x", _ints, {"k": (2, 9)}),
    (0, "f(x) returns x minus {k}.", "x - {k}", "{k} - x", "x", _ints, {"k": (1, 9)}),
    (1, "f(xs) returns the sum of the numbers in xs above {k}.", "sum(v for v in xs if v > {k})",
     "sum(v for v in xs if v >= {k})", "xs", _lists, {"k": (1, 7)}),
    (1, "f(xs) returns the largest number in xs.", "max(xs)", "xs[-1]", "xs", _lists, {}),
    (1, "f(s) returns how many times {c} occurs in s.", "s.count('{c}')", "len(s)", "s", _words, {"c": "abc"}),
    (2, "f(n) returns the sum of 1 to n.", "sum(range(n + 1))", "sum(range(n))", "n",
     lambda rng, n=7: [rng.randint(1, 20) for _ in range(n)], {}),
    (2, "f(s) returns s reversed.", "s[::-1]", "s", "s", _words, {}),
    (2, "f(x) returns {a} if x is even, else {b}.", "{a} if x % 2 == 0 else {b}", "{b} if x % 2 == 0 else {a}",
     "x", _ints, {"a": (0, 9), "b": (0, 9)}),
]


def source(arg: str, body: str) -> str:
    return f"def f({arg}): return {body}"


def make_task(rng: random.Random, level: int) -> dict | None:
    """A task at `level`, or None when the drawn parameters make a degenerate task (the caller
    draws again)."""
    templates = [t for t in TEMPLATES if t[0] == level]
    _, spec, ref, bug, arg, gen, params = rng.choice(templates)
    values: dict = {}
    for name, rangeish in params.items():
        values[name] = rng.choice(rangeish) if isinstance(rangeish, str) else rng.randint(*rangeish)
    values["k1"] = values.get("k", 0) + 1
    if "a" in values and values["a"] == values["b"]:
        return None
    reference, buggy = source(arg, ref.format(**values)), source(arg, bug.format(**values))
    inputs = gen(rng)
    ref_fn, bug_fn = _compile(reference), _compile(buggy)
    cases = [(x, ref_fn(x)) for x in inputs]
    visible, hidden = cases[:2], cases[2:]
    if all(bug_fn(x) == y for x, y in visible) or all(bug_fn(x) == y for x, y in hidden):
        return None
    if len({repr(x) for x in inputs}) < len(inputs):
        return None
    examples = ", ".join(f"f({x!r}) == {y!r}" for x, y in visible)
    return {"prompt": f"write {spec.format(**values)} examples: {examples}", "reference": reference,
            "buggy": buggy, "visible": visible, "hidden": hidden}


def _compile(src: str):
    """Compiles our own reference or bug (trusted template text, never policy output)."""
    scope: dict = {}
    exec(src, scope)  # noqa: S102 - trusted template code
    return scope["f"]

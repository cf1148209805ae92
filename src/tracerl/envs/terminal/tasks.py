"""Terminal task families: a data file, a one-line shell job, and the job's exact result.

Each family gives a description for the prompt, the reference script (one shell line that reads
data.txt and writes out.txt), a plausible buggy script (the expert's mistake), and the result
computed in Python (never by running the reference), so the verifier's expected output does not
depend on the sandbox's tools. Words are lowercase ASCII, so `sort` agrees with Python's sort in
any locale.
"""

from __future__ import annotations

import random

WORDS = ("apple", "kiwi", "plum", "fig", "pear", "lime", "date", "grape", "melon", "peach", "berry", "mango")
LEVELS = (0, 1, 2)


def _lines(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n)]


def _fmt(lines: list[str]) -> str:
    return "".join(x + "\n" for x in lines)


def _families(rng: random.Random):
    """(name, level, description, script, buggy, result(lines) -> text); parameters drawn from rng."""
    w = rng.choice(WORDS)
    k = rng.randint(2, 4)
    letter = rng.choice("aeilnpr")
    return [
        ("sort", 0, "the lines of data.txt sorted", "sort data.txt > out.txt", "sort -r data.txt > out.txt",
         lambda ls: _fmt(sorted(ls))),
        ("count", 0, "the number of lines of data.txt", "wc -l < data.txt > out.txt", "wc -w < data.txt | head -c 1 > out.txt",
         lambda ls: f"{len(ls)}\n"),
        ("upper", 0, "data.txt in upper case", "tr a-z A-Z < data.txt > out.txt", "tr A-Z a-z < data.txt > out.txt",
         lambda ls: _fmt([x.upper() for x in ls])),
        ("grep_count", 1, f"the number of lines of data.txt that are {w}", f"grep -c -x {w} data.txt > out.txt",
         f"grep -c {w[0]} data.txt > out.txt", lambda ls: f"{sum(x == w for x in ls)}\n"),
        ("head", 1, f"the first {k} lines of data.txt", f"head -n {k} data.txt > out.txt",
         f"head -n {k + 1} data.txt > out.txt", lambda ls: _fmt(ls[:k])),
        ("uniq", 1, "the distinct lines of data.txt, sorted", "sort -u data.txt > out.txt", "sort data.txt > out.txt",
         lambda ls: _fmt(sorted(set(ls)))),
        ("grep_sort", 2, f"the lines of data.txt that contain {letter}, sorted", f"grep {letter} data.txt | sort > out.txt",
         f"grep {letter} data.txt > out.txt", lambda ls: _fmt(sorted(x for x in ls if letter in x))),
        ("distinct_count", 2, "the number of distinct lines of data.txt", "sort -u data.txt | wc -l > out.txt",
         "wc -l < data.txt > out.txt", lambda ls: f"{len(set(ls))}\n"),
    ]


def make_task(rng: random.Random, level: int) -> dict:
    fams = [f for f in _families(rng) if f[1] == level]
    name, _, desc, script, buggy, result = rng.choice(fams)
    visible = _lines(rng, rng.randint(5, 8))
    hidden = [_lines(rng, rng.randint(6, 9)) for _ in range(2)]
    if result(visible) == _fmt(visible) or any(result(h) == result(visible) for h in hidden):
        return make_task(rng, level)  # each check must tell a real script from a constant or a no-op
    return {"family": name, "description": desc, "script": script, "buggy": buggy,
            "files": {"data.txt": _fmt(visible)}, "expected": result(visible),
            "hidden": [{"files": {"data.txt": _fmt(h)}, "expected": result(h)} for h in hidden]}

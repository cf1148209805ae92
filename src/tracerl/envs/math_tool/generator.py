"""Procedural arithmetic word problems with a difficulty knob and a disjoint held-out split.

Difficulty d in [0, 1] sets the number of operations (1 + round(2d): one to three) and the size
of the numbers in the text (up to 9, 20, 50 or 99; answers grow larger). A problem's split is decided by a hash of its content when it is created, so the
held-out split is disjoint from training by construction, before any sampling or filtering.
"""

from __future__ import annotations

import hashlib
import random

from tracerl.contract.task import Task

SOURCE = "math_tool"
REVISION = "math_tool-gen-4"
NAMES = ("Ann", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Ida", "Jo", "Kim", "Lu", "Max")
ITEMS = ("apples", "coins", "books", "cards", "pens", "shells", "stamps", "eggs")
HELDOUT_PERCENT = 20


def _num(rng: random.Random, d: float) -> int:
    hi = 9 if d < 0.25 else (20 if d < 0.5 else (50 if d < 0.75 else 99))
    return rng.randint(2, hi)


def make_problem(rng: random.Random, difficulty: float) -> tuple[str, str, int]:
    """Return (text, program, answer). The program mirrors the text one statement per sentence
    (`x=23;x+=4*17;x*=2;print(x)`), so writing it is transcription, not planning."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a = _num(rng, difficulty)
    text, expr, value = f"{name} has {a} {item}.", f"x={a}", a
    for _ in range(1 + round(2 * difficulty)):
        op = rng.choice(("add", "sub", "mul_add", "times"))
        b = _num(rng, difficulty)
        if op == "add":
            text, expr, value = text + f" {name} gets {b} more.", f"{expr};x+={b}", value + b
        elif op == "sub" and b <= value:
            text, expr, value = text + f" {name} gives away {b}.", f"{expr};x-={b}", value - b
        elif op == "mul_add":
            k = rng.randint(2, 9)
            text, expr, value = text + f" {name} gets {k} bags of {b}.", f"{expr};x+={k}*{b}", value + k * b
        else:
            k = rng.randint(2, 4)
            text, expr, value = text + f" The {item} are multiplied by {k}.", f"{expr};x*={k}", value * k
    return text + f" How many {item} does {name} have?", expr + ";print(x)", value


def split_of(text: str) -> str:
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return "heldout" if h % 100 < HELDOUT_PERCENT else "train"


def generate(split: str = "train", n: int = 100, seed: int = 0,
             difficulty: float | tuple[float, float] | None = (0.0, 1.0)) -> list[Task]:
    """`n` distinct tasks of `split`, difficulty uniform in the given range (one value, or None for
    the whole range [0, 1]), deterministic in seed."""
    if difficulty is None:
        difficulty = (0.0, 1.0)
    elif isinstance(difficulty, int | float):
        difficulty = (float(difficulty), float(difficulty))
    difficulty = tuple(difficulty)
    rng = random.Random(f"{SOURCE}:{split}:{seed}:{difficulty}")
    tasks, seen = [], set()
    while len(tasks) < n:
        d = rng.uniform(*difficulty)
        text, expr, value = make_problem(rng, d)
        if text in seen or split_of(text) != split:
            continue
        seen.add(text)
        tid = hashlib.sha256(text.encode()).hexdigest()[:12]
        tasks.append(Task(id=f"math-{tid}", source=SOURCE, source_revision=REVISION, split=split,
                          prompt=text, answer=str(value), difficulty=round(d, 3),
                          metadata={"program": expr, "ops": expr.count(";") - 1}))
    return tasks

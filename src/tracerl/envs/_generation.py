"""Shared by the built-in generators: the difficulty knob and the content-hash split.

Difficulty is on the scale every recipe uses, [0, 1] (0 easiest); an environment with discrete
levels 0..L maps d to level round(d * L). `generate(..., difficulty)` accepts None (every level),
one number, or a (low, high) range. A task's split is a function of a hash of its content, decided
when it is created, so train and held-out never share a task whatever seeds are asked for.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

from tracerl.contract.task import SPLITS, Task
from tracerl.errors import UserError

HELDOUT_PERCENT = 20


def split_of(key: str) -> str:
    return "heldout" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT else "train"


def levels_for(env: str, difficulty, max_level: int) -> list[int]:
    """The levels a difficulty request covers, each in 0..max_level."""
    if difficulty is None:
        return list(range(max_level + 1))
    lo, hi = (difficulty, difficulty) if isinstance(difficulty, (int, float)) else tuple(difficulty)
    if not (0.0 <= lo <= hi <= 1.0):
        raise UserError(f"{env} difficulty {difficulty!r} is out of range; use numbers in [0, 1] with low <= high")
    levels = [k for k in range(max_level + 1) if lo - 1e-9 <= k / max_level <= hi + 1e-9]
    return levels or [round((lo + hi) / 2 * max_level)]


def generate_tasks(env: str, split: str, n: int, seed: int, difficulty, max_level: int,
                   make: Callable[[random.Random, int], tuple[str, dict]]) -> list[Task]:
    """Draws candidates `make(rng, level) -> (content key, Task fields)` until `n` distinct ones of
    `split`; the task id is a hash of the content key, so equal content means equal id."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
    levels = levels_for(env, difficulty, max_level)
    tasks: list[Task] = []
    seen: set[str] = set()
    i = 0
    while len(tasks) < n:
        if i > 100 * n + 1000:
            raise UserError(f"{env} has only {len(tasks)} distinct {split} tasks at difficulty "
                            f"{difficulty!r}; ask for fewer")
        rng = random.Random(f"{env}:{seed}:{i}")
        i += 1
        level = rng.choice(levels)
        key, fields = make(rng, level)
        if split_of(key) != split or key in seen:
            continue
        seen.add(key)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        tasks.append(Task(id=f"{env}-{digest}", split=split, difficulty=level / max_level, **fields))
    return tasks

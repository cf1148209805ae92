"""Difficulty profiles: how often a policy solves each task, measured by sampling N attempts.

A profile depends on the policy that produced it (Skywork-OR1 keeps 38–48% of the same prompts
depending on the start model), so it records which policy and how many attempts. `profile()` takes
any callable that returns per-task successes, which keeps it testable without a model; the CLI
wires it to the rollout engine.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tracerl.contract.task import Task
from tracerl.errors import UserError

log = logging.getLogger("tracerl.tasks")

# attempt_fn(tasks, n) -> per task, successes (an int in 0..n) or (successes, attempts) when some
# attempts did not count (e.g. infrastructure failures)
AttemptFn = Callable[[list[Task], int], Sequence[int | tuple[int, int]]]


@dataclasses.dataclass
class ProfileEntry:
    attempts: int = 0
    successes: int = 0

    @property
    def pass_rate(self) -> float:
        return self.successes / self.attempts if self.attempts else float("nan")


class DifficultyProfile:
    """task id -> attempts, successes and pass rate, with the policy it was measured under."""

    def __init__(self, entries: dict[str, ProfileEntry] | None = None, *, policy: str = "", meta: dict[str, Any] | None = None):
        self.entries: dict[str, ProfileEntry] = dict(entries or {})
        self.policy = policy
        self.meta: dict[str, Any] = dict(meta or {})

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, task_id: str) -> ProfileEntry | None:
        return self.entries.get(task_id)

    def pass_rate(self, task_id: str, default: float | None = None) -> float | None:
        e = self.entries.get(task_id)
        return e.pass_rate if e is not None and e.attempts else default

    def record(self, task_id: str, successes: int, attempts: int) -> None:
        if not 0 <= successes <= attempts:
            raise ValueError(f"task {task_id!r}: successes {successes} must lie in 0..{attempts}")
        e = self.entries.setdefault(task_id, ProfileEntry())
        e.attempts += attempts
        e.successes += successes

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "meta": self.meta,
                "tasks": {k: {"attempts": e.attempts, "successes": e.successes,
                              "pass_rate": e.pass_rate if e.attempts else None}
                          for k, e in sorted(self.entries.items())}}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "DifficultyProfile":
        p = Path(path)
        if not p.exists():
            raise UserError(f"difficulty profile {str(p)!r} does not exist; write it with `tracerl tasks profile`")
        try:
            d = json.loads(p.read_text())
            entries = {k: ProfileEntry(int(v["attempts"]), int(v["successes"])) for k, v in d["tasks"].items()}
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise UserError(f"{str(p)!r} is not a difficulty profile ({err}); regenerate it with `tracerl tasks profile`") from None
        return cls(entries, policy=d.get("policy", ""), meta=d.get("meta", {}))


def profile(tasks: Iterable[Task], attempt_fn: AttemptFn, n: int = 8, *, batch_size: int = 64, policy: str = "",
            into: DifficultyProfile | None = None) -> DifficultyProfile:
    """Sample `n` attempts per task with `attempt_fn` and record successes; returns the (new or given) profile."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    prof = into if into is not None else DifficultyProfile(policy=policy, meta={"attempts_per_task": n})
    tasks = list(tasks)
    for start in range(0, len(tasks), batch_size):
        batch = tasks[start:start + batch_size]
        successes = list(attempt_fn(batch, n))
        if len(successes) != len(batch):
            raise ValueError(f"attempt_fn returned {len(successes)} results for {len(batch)} tasks")
        for task, s in zip(batch, successes):
            wins, tries = (int(s[0]), int(s[1])) if isinstance(s, tuple | list) else (int(s), n)
            if tries > n:
                raise ValueError(f"task {task.id!r}: attempt_fn reported {tries} attempts, more than n={n}")
            prof.record(task.id, wins, tries)
        log.info("profiled %d/%d tasks", min(start + batch_size, len(tasks)), len(tasks))
    return prof


PASS_RATE_BUCKETS = ((0.0, 0.0, "0"), (0.0, 0.25, "(0,0.25]"), (0.25, 0.5, "(0.25,0.5]"),
                     (0.5, 0.75, "(0.5,0.75]"), (0.75, 1.0, "(0.75,1)"), (1.0, 1.0, "1"))


def difficulty_bucket(task: Task, prof: DifficultyProfile | None) -> str:
    """A task's pass-rate band under the profile, else its declared difficulty, else 'unknown'."""
    rate = prof.pass_rate(task.id) if prof is not None else None
    if rate is not None:
        if rate <= 0.0:
            return "pass 0"
        if rate >= 1.0:
            return "pass 1"
        for lo, hi, label in PASS_RATE_BUCKETS[1:-1]:
            if lo < rate <= hi or (label == "(0.75,1)" and rate > lo):
                return f"pass {label}"
    if task.difficulty is not None:
        d = task.difficulty
        if 0.0 <= d <= 1.0:  # the [0, 1] scale of the built-in generators, in quarters
            q = min(int(d * 4), 3)
            return f"difficulty [{q / 4:g},{(q + 1) / 4:g}{']' if q == 3 else ')'}"
        return f"difficulty {d:g}"
    return "unknown"

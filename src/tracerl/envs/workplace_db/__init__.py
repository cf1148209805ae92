"""workplace_db: an office assistant over SQLite, verified by the final database state."""

from __future__ import annotations

import hashlib
import json
import random

from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.workplace_db.env import NAME, REVISION, WorkplaceDBEnv, expected_state, make_expert
from tracerl.envs.workplace_db.tasks import LEVELS, make_task
from tracerl.errors import UserError
from tracerl.tasks.task import SPLITS, Task

DIFFICULTY_RANGE = (min(LEVELS), max(LEVELS))
EXPERT_ERROR_RATE = 0.2


def _split_of(key: str) -> str:
    return "heldout" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 5 == 0 else "train"


def generate(split: str, n: int, seed: int = 0, difficulty: float | None = None) -> list[Task]:
    """`n` tasks of `split`; a task (database and request) is held out iff its content hash falls
    in the held-out bucket, so the splits are disjoint."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
    if difficulty is not None and round(difficulty) not in LEVELS:
        raise UserError(f"workplace_db difficulty {difficulty!r} is out of range; use {DIFFICULTY_RANGE}")
    tasks: list[Task] = []
    seen: set[str] = set()
    i = 0
    while len(tasks) < n:
        if i > 100 * n + 1000:
            raise UserError(f"workplace_db has only {len(tasks)} distinct {split} tasks; ask for fewer")
        rng = random.Random(f"{NAME}:{seed}:{i}")
        i += 1
        level = round(difficulty) if difficulty is not None else rng.choice(LEVELS)
        t = make_task(rng, level)
        key = json.dumps({"rows": t["rows"], "prompt": t["prompt"]}, sort_keys=True)
        if _split_of(key) != split or key in seen:
            continue
        seen.add(key)
        tasks.append(Task(
            id=f"{NAME}-{hashlib.sha256(key.encode()).hexdigest()[:12]}", source=NAME,
            source_revision=REVISION, split=split, prompt=t["prompt"], answer=None,
            difficulty=float(level),
            metadata={k: t[k] for k in ("rows", "script", "shortcut", "first_result")},
        ))
    return tasks


def audit_cases() -> list[dict]:
    """Call sequences that must not be rewarded (the database ends wrong, or nothing is verified)
    and the reference calls, with and without retried writes, which must be."""
    task = generate("train", 1, seed=5, difficulty=2)[0]
    script = task.metadata["script"]
    wrap = lambda calls: [f"<call>{c}</call>" for c in calls]  # noqa: E731
    bad = [
        wrap(["done"]),  # do nothing
        wrap(script[:-2] + ["done"]),  # look up but never write
        wrap(script[:-1] + ["set tickets id=1 status=closed", "done"]),  # collateral change
        wrap(script[:-1] + ["delete tickets id=1", "add employees name=zz team=red", "done"]),  # extra row
        wrap(script[:-2]) + ["the ticket is now assigned. done"],  # claim success in prose
        wrap(["find tickets topic=x' OR '1'='1", "set tickets id=1 owner=1; DROP TABLE tickets", "done"]),
    ]
    retried = [c for c in script[:-1] for _ in range(2)] + ["done"]
    return ([{"task": task, "actions": a, "rewarded": False} for a in bad]
            + [{"task": task, "actions": wrap(script), "rewarded": True},
               {"task": task, "actions": wrap(retried), "rewarded": True}])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=WorkplaceDBEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE), reward_weights={"db_match": 1.0},
    stop_strings=("</call>",),
    special_tokens=("<call>", "</call>", "<result>", "</result>", "<error>", "</error>"),
    tools=("find", "set", "add", "done"),
    description="office assistant over an in-memory SQLite database; verified by the final database state",
))

__all__ = ["SPEC", "WorkplaceDBEnv", "audit_cases", "expected_state", "generate", "make_expert"]

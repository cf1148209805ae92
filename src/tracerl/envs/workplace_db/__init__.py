"""workplace_db: an office assistant over SQLite, verified by the final database state."""

from __future__ import annotations

import json
import random

from tracerl.contract.task import Task
from tracerl.envs import _audit
from tracerl.envs._generation import generate_tasks
from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.workplace_db.env import NAME, REVISION, VERIFIER, WorkplaceDBEnv, expected_state, make_expert
from tracerl.envs.workplace_db.tasks import LEVELS, make_task

DIFFICULTY_RANGE = (0.0, 1.0)
EXPERT_ERROR_RATE = 0.2


def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
    """`n` tasks of `split`; a task (database and request) is held out iff its content hash falls
    in the held-out bucket, so the splits are disjoint. Difficulty in [0, 1] maps to levels 0..3:
    close a ticket by id; move a person (one look-up); reassign a ticket (two look-ups); add a
    person and hand them a ticket."""

    def make(rng: random.Random, level: int) -> tuple[str, dict]:
        t = make_task(rng, level)
        key = json.dumps({"rows": t["rows"], "prompt": t["prompt"]}, sort_keys=True)
        meta = {k: t[k] for k in ("rows", "script", "shortcut", "first_result")}
        # the reference calls double as the task's `answer` (the task schema needs one); the verifier
        # never reads it, it compares the final database with `expected_state`
        return key, {"source": NAME, "source_revision": REVISION, "prompt": t["prompt"], "answer": t["script"],
                     "metadata": meta}

    return generate_tasks(NAME, split, n, seed, difficulty, max(LEVELS), make)


def audit_cases() -> list[dict]:
    """Call sequences that must not be rewarded (the database ends wrong, or nothing is verified)
    and the reference calls, with and without retried writes, which must be."""
    task = generate("train", 1, seed=5, difficulty=2 / 3)[0]
    script = task.metadata["script"]
    wrap = lambda calls: [f"<call>{c}</call>" for c in calls]  # noqa: E731
    bad = [
        (wrap(["done"]), "do nothing and finish"),
        (wrap(script[:-2] + ["done"]), "look up but never write"),
        (wrap(script[:-1] + ["set tickets id 1 status closed", "done"]), "right write plus a collateral change"),
        (wrap(script[:-1] + ["delete tickets id 1", "add employees name zz team red", "done"]), "delete, then an extra row"),
        (wrap(script[:-2]) + ["the ticket is now assigned. done"], "claim success in prose"),
        (wrap(["find tickets topic x' OR '1'='1", "set tickets id 1 owner 1; DROP TABLE tickets", "done"]),
         "SQL injection through values"),
    ]
    retried = [c for c in script[:-1] for _ in range(2)] + ["done"]
    return ([{"task": task, "actions": a, "rewarded": False, "attack": why} for a, why in bad]
            + [{"task": task, "actions": wrap(script), "rewarded": True, "attack": "reference calls"},
               {"task": task, "actions": wrap(retried), "rewarded": True, "attack": "every write retried"}])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=WorkplaceDBEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE), reward_weights={"correct": 1.0, "invalid_actions": -0.1},
    stop_strings=("</call>",), verifier=VERIFIER,
    special_tokens=("<call>", "</call>", "<result>", "</result>", "<error>", "</error>"),
    tools=("find", "set", "add", "done"),
    description="office assistant over an in-memory SQLite database; verified by the final database state",
))

audit = _audit.register(SPEC, audit_cases)  # `tracerl audit` builder: (verifier, cases)

__all__ = ["SPEC", "WorkplaceDBEnv", "audit_cases", "expected_state", "generate", "make_expert"]

"""The workplace_db verifier: the whole final database against the state the reference calls produce.

Evidence: `{"db": db.dump(...) of the final database, or None when the episode ended without `done`,
"invalid_actions": int}`. The transcript is never read.
"""

from __future__ import annotations

from tracerl.envs._verify import EnvVerifier
from tracerl.envs.workplace_db import db
from tracerl.verifiers.registry import register_verifier

NAME = "workplace_db.final_state"


def expected_state(task) -> dict:
    """The database after the task's reference calls: the only thing the verifier compares with."""
    conn = db.connect(task.metadata["rows"])
    for call in task.metadata["script"]:
        op, table, args = db.parse(call)
        if op != "done":
            db.execute(conn, op, table, args)
    return db.dump(conn)


class WorkplaceDBFinalState(EnvVerifier):
    name, revision, env = NAME, "workplace_db-final-state-1", "workplace_db"
    components, primary = ("correct", "invalid_actions"), "correct"

    def score(self, task, evidence):
        final = evidence.get("db")
        match = float(final is not None and final == expected_state(task))
        return {"correct": match, "invalid_actions": float(evidence.get("invalid_actions", 0))}, {}


register_verifier(NAME, WorkplaceDBFinalState, replace=True)

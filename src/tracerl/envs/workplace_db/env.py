"""The workplace_db environment: an office assistant whose work is judged by the final database.

Grammar: each turn ends with `<call>…</call>` (see `db.py` for the call language); the observation
is `<result>…</result>`. `<call>done</call>` ends the episode (`eos`) and the verifier compares the
whole database with the state the task's reference calls produce (`correct`); the transcript is
never read. `invalid_actions` counts malformed and blocked calls (weight −0.1, as in text_world), so
that RL gets a signal against degenerate calls even in groups where no episode succeeds.
Malformed calls are `invalid_action`, deletions `blocked_action`; both leave the database untouched
and consume a turn. The `MAX_INVALID`-th of them ends the episode as `env_failure` (`correct` 0): a
policy that only babbles otherwise runs into the turn or token budget, a truncation that RL masks,
so it would never learn that babbling fails. An SQLite error that escapes validation is a tool fault: `infra_failure`.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._verify import grade
from tracerl.envs.base import Message, Step
from tracerl.envs.grammar import parse_tagged
from tracerl.envs.workplace_db import db
from tracerl.envs.workplace_db.verifier import NAME as VERIFIER, expected_state

NAME = "workplace_db"
__all__ = ["NAME", "REVISION", "VERIFIER", "WorkplaceDBEnv", "expected_state", "make_expert"]
REVISION = "workplace_db-env-2"  # 2: the MAX_INVALID-th invalid call ends the episode as a failure; tasks carry the reference calls as `answer`
MAX_INVALID = 2
SYSTEM = ("You run the office database (employees: id name team; tickets: id topic owner status). "
          "Each turn write one <call>…</call>: find TABLE col value, set TABLE id N col value, "
          "add TABLE col value …, or done.")


class WorkplaceDBEnv:
    name = NAME
    revision = REVISION

    def __init__(self, max_invalid: int | None = MAX_INVALID) -> None:
        self._conn: sqlite3.Connection | None = None
        self.max_invalid = max_invalid

    def reset(self, task: Task, seed: int) -> list[Message]:
        self._task = task
        self._conn = db.connect(task.metadata["rows"])
        self._done = False
        self._calls = 0
        self._invalid = 0
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.prompt}]

    def step(self, action_text: str) -> Step:
        assert self._conn is not None, "call reset() before step()"
        if self._done:
            return _error("invalid_action", "the episode has ended")
        action = parse_tagged(action_text, ("call",))
        if action.kind == "invalid":
            return self._invalid_step("invalid_action", action.reason)
        try:
            op, table, args = db.parse(action.body)
            if op == "done":
                self._done = True
                comps, info = grade(VERIFIER, self._task, {"db": db.dump(self._conn), "invalid_actions": self._invalid})
                return Step(None, True, TerminalReason.EOS, comps, {"tool": "done", "calls": self._calls, **info})
            self._calls += 1
            result = db.execute(self._conn, op, table, args)
        except db.CallError as err:
            return self._invalid_step(err.kind, str(err))
        except sqlite3.Error as err:  # validation passed, so this is the database failing, not the policy
            self._done = True
            return Step(None, True, TerminalReason.INFRA_FAILURE, {},
                        {"tool": op, "infra_error": f"{type(err).__name__}: {err}"})
        return Step(f"<result>{result}</result>\n", info={"tool": op, "tool_status": "ok", "invalid_action": False})

    def _invalid_step(self, kind: str, why: str) -> Step:
        self._invalid += 1
        step = _error(kind, why)
        if self.max_invalid is not None and self._invalid >= self.max_invalid:
            self._done = True
            comps, info = grade(VERIFIER, self._task, {"db": None, "invalid_actions": self._invalid})
            return Step(step.observation, True, TerminalReason.ENV_FAILURE, comps, {**step.info, **info})
        return step

    def state_hash(self) -> str:
        return db.digest(self._conn) if self._conn is not None else ""


def _error(kind: str, why: str, tool: str | None = None) -> Step:
    return Step(f"<error>{kind}: {why}</error>\n",
                info={"invalid_action": True, "blocked_action": kind == "blocked_action", "tool": tool,
                      "tool_status": kind})


def make_expert(error_rate: float = 0.2) -> Callable[[Task, list[str], random.Random], str]:
    """Follows the task's reference calls. With probability `error_rate` (drawn on the first turn)
    it skips the look-ups and writes with a guessed, wrong id, then says done: the kind of shortcut a
    model cloned from it keeps until RL shows that looking up pays. The expert recognises which path
    it is on from the observations alone (the reference path's first result is known in advance).
    Like the search expert it writes a space after the opening tag, so every word of a call is
    tokenized as it is in the request and the results."""

    def expert(task: Task, observations: list[str], rng: random.Random, *, error_rate: float = error_rate) -> str:
        script = task.metadata["script"]
        if not observations:
            if rng.random() < error_rate:
                return f"<call> {task.metadata['shortcut']}</call>"
            return f"<call> {script[0]}</call>"
        if observations[0] != task.metadata["first_result"]:
            return "<call> done</call>"  # on the shortcut path
        return f"<call> {script[min(len(observations), len(script) - 1)]}</call>"

    return expert

"""The terminal environment: a shell inside the sandbox, judged by the resulting file system.

Grammar: `<sh>command</sh>` runs one shell command (`/bin/sh -c`) in the task's working directory
inside the sandbox (envs/_shell.py; the tree persists across commands on the host); the
observation is `<output>exit N: first output</output>`. `<done>…</done>` ends the episode (`eos`)
and the verifier (`terminal.fs_state`) judges the final tree and re-runs solve.sh on hidden data.
At most `CMD_BUDGET` commands; the `MAX_INVALID`-th invalid turn ends the episode as
`env_failure` (graded by the verifier on the tree as it is). A sandbox fault is `infra_failure`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._file_tree import graded_end, invalid, invalid_turn, tree_hash
from tracerl.envs._shell import run_shell
from tracerl.envs.base import Message, Step
from tracerl.envs.grammar import parse_tagged
from tracerl.envs.terminal.verifier import NAME as VERIFIER

NAME = "terminal"
REVISION = "terminal-env-1"
CMD_BUDGET = 4
MAX_INVALID = 2
SYSTEM = ("You have a shell. Run a command with <sh>command</sh>; the exit code and output come back in "
          "<output></output>. Finish with <done>ok</done>.")


class TerminalEnv:
    name = NAME
    revision = REVISION

    def __init__(self, sandbox=None, cmd_budget: int = CMD_BUDGET, max_invalid: int | None = MAX_INVALID) -> None:
        self._sandbox, self.cmd_budget, self.max_invalid = sandbox, cmd_budget, max_invalid
        self._task: Task | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self._task = task
        self.files: dict[str, str] = dict(task.metadata["files"])
        self._cmds, self._invalid, self._done = 0, 0, False
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.prompt}]

    def step(self, action_text: str) -> Step:
        assert self._task is not None, "call reset() before step()"
        if self._done:
            return invalid("the episode has ended")
        action = parse_tagged(action_text, ("sh", "done"))
        if action.kind == "invalid":
            return self._invalid_step(action.reason)
        if action.kind == "done":
            return self._finish(TerminalReason.EOS, {"tool": "done"})
        if self._cmds >= self.cmd_budget:
            return self._invalid_step(f"command budget of {self.cmd_budget} is spent; finish with <done>ok</done>")
        if not action.body:
            return self._invalid_step("empty command")
        self._cmds += 1
        res = run_shell(action.body, self.files, sandbox=self._sandbox)
        if res.infra_failure:
            self._done = True
            return Step(None, True, TerminalReason.INFRA_FAILURE, {},
                        {"tool": "sh", "tool_status": "crash", "infra_error": res.stderr[:200]})
        if res.files is not None:
            self.files = res.files
            first = (res.stdout.strip() or res.stderr.strip()).splitlines()[:1]
            text = f"exit {res.exit_code}" + (f": {first[0][:60]}" if first else "")
            status = "ok" if res.exit_code == 0 else "error"
        else:
            text, status = f"{res.status}: the command did not finish", res.status
        return Step(f"<output>{text}</output>\n", info={"tool": "sh", "tool_status": status, "invalid_action": False})

    def _finish(self, reason: TerminalReason, info: dict) -> Step:
        self._done = True
        return graded_end(VERIFIER, self._task, self.files, sandbox=self._sandbox, reason=reason, info=info, extra={"commands": self._cmds})

    def _invalid_step(self, why: str) -> Step:
        self._invalid += 1
        return invalid_turn(why, self._invalid, self.max_invalid, self._finish)

    def state_hash(self) -> str:
        return tree_hash(self._task, getattr(self, "files", None))


def make_expert(error_rate: float = 0.2) -> Callable[[Task, list[str], random.Random], str]:
    """Writes the job as solve.sh and runs it in one command, then finishes. With probability
    `error_rate` (drawn on the first turn) it writes the family's plausible bug instead (reverse
    sort, an off-by-one head, a missing filter), the habit RL has to remove."""

    def expert(task: Task, observations: list[str], rng: random.Random, *, error_rate: float = error_rate) -> str:
        meta = task.metadata
        if not observations:
            script = meta["buggy"] if rng.random() < error_rate else meta["script"]
            return f'<sh>echo "{script}" > solve.sh && sh solve.sh</sh>'
        return "<done>ok</done>"

    return expert

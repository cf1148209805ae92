"""What the file-tree environments share (terminal, swe): each keeps the task's working tree on the
host (`files`, path -> text), counts invalid turns, and ends graded by its verifier on that tree.

`invalid_turn`: the `max_invalid`-th invalid turn ends the episode as `env_failure`, graded on the
tree as it is (a policy cannot dodge the grade by babbling). `graded_end`: the verifier's reward
components; a sandbox failure while grading is `infra_failure`, never a reward.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._verify import grade
from tracerl.envs.base import Step


def invalid(why: str) -> Step:
    """An invalid turn: the error is shown and the episode goes on."""
    return Step(f"<error>invalid_action: {why}</error>\n", info={"invalid_action": True})


def invalid_turn(why: str, count: int, max_invalid: int | None, finish: Callable[[TerminalReason, dict], Step]) -> Step:
    """The `count`-th invalid turn; `finish(reason, info)` ends the episode when it is the `max_invalid`-th."""
    step = invalid(why)
    if max_invalid is not None and count >= max_invalid:
        out = finish(TerminalReason.ENV_FAILURE, step.info)
        return Step(step.observation, True, out.terminal_reason, out.reward_components, out.info)
    return step


def graded_end(verifier: str, task: Task, files: dict[str, str], *, sandbox, reason: TerminalReason, info: dict,
               extra: dict | None = None) -> Step:
    """The episode's last step, graded by `verifier` on `files`; `extra` joins the info of a graded end."""
    try:
        comps, vinfo = grade(verifier, task, {"files": files}, sandbox=sandbox)
    except RuntimeError as err:
        return Step(None, True, TerminalReason.INFRA_FAILURE, {}, {**info, "infra_error": str(err)[:200]})
    return Step(None, True, reason, comps, {**info, **vinfo, **(extra or {})})


def tree_hash(task: Task | None, files: dict[str, str] | None) -> str:
    payload = {"task": task.id if task else None, "files": files}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

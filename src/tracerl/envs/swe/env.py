"""The swe environment: fix the planted bug of a small generated repository.

Grammar, one call per turn: `<ls></ls>` lists the files; `<cat>path</cat>` shows one;
`<grep>text</grep>` finds the lines holding a literal text; `<edit>path: old => new</edit>`
replaces the first occurrence of `old` in the file; `<test></test>` runs the repository's visible
tests (test_calc.py, as the tree now holds it) in the sandbox and shows the first failure or
`all N ok`; `<done>…</done>` ends the episode (`eos`). The reward comes from the hidden tests on a
fresh copy of the edited repository (`swe.hidden_tests`). The `MAX_INVALID`-th invalid call ends
the episode as `env_failure` (graded as the tree is). A sandbox fault is `infra_failure`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._file_tree import graded_end, invalid, invalid_turn, tree_hash
from tracerl.envs.base import Message, Step
from tracerl.envs.grammar import parse_tagged
from tracerl.envs.swe.verifier import NAME as VERIFIER
from tracerl.sandbox import Limits

NAME = "swe"
REVISION = "swe-env-1"
MAX_INVALID = 2
TOOLS = ("ls", "cat", "grep", "edit", "test", "done")
SYSTEM = ("Fix the bug in the repository. Tools: <ls></ls>, <cat>file</cat>, <grep>text</grep>, "
          "<edit>file: old => new</edit>, <test></test> runs the tests; finish with <done>ok</done>.")
TEST_LIMITS = Limits(cpu_s=1.0, wall_s=2.0, memory_bytes=256 << 20, output_bytes=8192)
MAX_FILES, MAX_CHARS = 16, 4000


class SWEEnv:
    name = NAME
    revision = REVISION

    def __init__(self, sandbox=None, max_invalid: int | None = MAX_INVALID) -> None:
        self._sandbox, self.max_invalid = sandbox, max_invalid
        self._task: Task | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self._task = task
        self.files: dict[str, str] = dict(task.metadata["files"])
        self._invalid, self._done = 0, False
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.prompt}]

    def step(self, action_text: str) -> Step:
        assert self._task is not None, "call reset() before step()"
        if self._done:
            return invalid("the episode has ended")
        action = parse_tagged(action_text, TOOLS)
        if action.kind == "invalid":
            return self._invalid_step(action.reason)
        if action.kind == "done":
            return self._finish(TerminalReason.EOS, {"tool": "done"})
        if action.kind == "test":
            return self._test()
        out = getattr(self, f"_{action.kind}")(action.body)
        if out is None:
            return self._invalid_step(f"bad <{action.kind}> call")
        return Step(f"<output>{out}</output>\n", info={"tool": action.kind, "tool_status": "ok", "invalid_action": False})

    def _ls(self, body: str) -> str:
        return " ".join(sorted(self.files))

    def _cat(self, body: str) -> str | None:
        text = self.files.get(body.strip())
        return None if text is None else text[:400]

    def _grep(self, body: str) -> str | None:
        if not body:
            return None
        hits = [f"{p}:{i + 1}: {line.strip()}" for p in sorted(self.files)
                for i, line in enumerate(self.files[p].splitlines()) if body in line]
        return "\n".join(hits[:5]) or "no match"

    def _edit(self, body: str) -> str | None:
        path, sep, rest = body.partition(":")
        old, arrow, new = rest.partition(" => ")
        path, old, new = path.strip(), old.strip(), new.strip()
        if not sep or not arrow or not old or path not in self.files or old not in self.files[path]:
            return None
        text = self.files[path].replace(old, new, 1)
        if len(text) > MAX_CHARS:
            return None
        self.files[path] = text
        return f"edited {path}"

    def _test(self) -> Step:
        from tracerl.sandbox import default_sandbox

        source = self.files.get("test_calc.py", "")
        try:
            res = (self._sandbox or default_sandbox()).run(source, files=dict(self.files), limits=TEST_LIMITS)
        except Exception as err:
            res = None
            error = repr(err)
        if res is None or res.status == "crash":
            self._done = True
            return Step(None, True, TerminalReason.INFRA_FAILURE, {},
                        {"tool": "test", "tool_status": "crash", "infra_error": (error if res is None else res.reason or res.stderr)[-200:]})
        lines = [x for x in res.stdout.splitlines() if x.startswith(("ok ", "FAIL "))]
        fails = [x for x in lines if x.startswith("FAIL")]
        if res.status != "ok" and not lines:
            text = f"{res.status}: " + ((res.stderr.strip().splitlines() or [""])[-1][:80])
        elif fails:
            text = fails[0][:100]
        else:
            text = f"all {len(lines)} ok"
        return Step(f"<output>{text}</output>\n", info={"tool": "test", "tool_status": str(res.status), "invalid_action": False})

    def _finish(self, reason: TerminalReason, info: dict) -> Step:
        self._done = True
        return graded_end(VERIFIER, self._task, self.files, sandbox=self._sandbox, reason=reason, info=info)

    def _invalid_step(self, why: str) -> Step:
        self._invalid += 1
        return invalid_turn(why, self._invalid, self.max_invalid, self._finish)

    def state_hash(self) -> str:
        return tree_hash(self._task, getattr(self, "files", None))


def make_expert(error_rate: float = 0.2) -> Callable[[Task, list[str], random.Random], str]:
    """Runs the tests, replaces the failing function's bug line by the fix, runs the tests again
    and finishes. With probability `error_rate` (drawn on the first turn) it gives up after the first
    test run and submits the repository unfixed: a habit RL has to remove."""

    def expert(task: Task, observations: list[str], rng: random.Random, *, error_rate: float = error_rate) -> str:
        meta = task.metadata
        if not observations:
            return "<test></test>"
        if len(observations) == 1:
            if rng.random() < error_rate:
                return "<done>ok</done>"
            return f"<edit>calc.py: {meta['bug_line']} => {meta['fix_line']}</edit>"
        if len(observations) == 2:
            return "<test></test>"
        return "<done>ok</done>"

    return expert

"""The code_tests environment: write a one-line Python function from a spec, test it, submit it.

Grammar: `<run>code</run>` runs the code on the task's two visible examples in the sandbox (the
observation is `<output>pass 2/2</output>` or the first failure); `<answer>code</answer>` ends the
episode (`eos`) and the hidden tests score it through the unit-test verifier
(`tracerl.verifiers.UnitTestVerifier`: pristine copy per test, host-side comparison, nonce): the
`tests` component is the fraction passed. Runs use `harness.evaluate`, the same grader (each case
in its own process, a result channel the candidate cannot forge, host-side comparison) that also
returns the feedback line. A sandbox fault (status `crash`)
ends the episode as `infra_failure`, never a reward. The `MAX_INVALID`-th invalid action (malformed,
or a run past the budget) ends the episode as `env_failure` with `tests` 0: a babbling policy would
otherwise run into the turn or token budget, a truncation that RL masks, and never see it fail.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._verify import grade
from tracerl.envs.base import Message, Step
from tracerl.envs.code_tests.harness import evaluate
from tracerl.envs.code_tests.verifier import NAME as VERIFIER
from tracerl.envs.grammar import parse_tagged

NAME = "code_tests"
REVISION = "code_tests-env-2"  # 2: the MAX_INVALID-th invalid action ends the episode as a failure
RUN_BUDGET = 3
MAX_INVALID = 2
SYSTEM = ("Write the Python function. <run>code</run> tests it on the examples; "
          "submit with <answer>code</answer>.")


class CodeTestsEnv:
    name = NAME
    revision = REVISION

    def __init__(self, sandbox=None, run_budget: int = RUN_BUDGET, max_invalid: int | None = MAX_INVALID) -> None:
        self._sandbox = sandbox
        self.run_budget = run_budget
        self.max_invalid = max_invalid
        self._task: Task | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self._task = task
        self._runs: list[str] = []
        self._invalid = 0
        self._done = False
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.prompt}]

    def step(self, action_text: str) -> Step:
        assert self._task is not None, "call reset() before step()"
        if self._done:
            return _invalid("the episode has ended")
        action = parse_tagged(action_text, ("run", "answer"))
        if action.kind == "invalid":
            return self._invalid_step(action.reason)
        if action.kind == "run" and len(self._runs) >= self.run_budget:
            return self._invalid_step(f"run budget of {self.run_budget} is spent; submit an answer")
        if action.kind == "answer":
            return self._grade(action.body)
        out = evaluate(action.body, [tuple(c) for c in self._task.tests["visible"]], self._sandbox)
        info = {"tool": "run", "tool_status": out.status, "invalid_action": False}
        if out.infra_failure:
            self._done = True
            return Step(None, True, TerminalReason.INFRA_FAILURE, {}, {**info, "infra_error": out.feedback})
        self._runs.append(action.body)
        text = f"pass {out.passed}/{out.total}" if out.passed == out.total else out.feedback
        return Step(f"<output>{text}</output>\n", info=info)

    def _invalid_step(self, why: str) -> Step:
        self._invalid += 1
        step = _invalid(why)
        if self.max_invalid is not None and self._invalid >= self.max_invalid:
            self._done = True
            comps, info = grade(VERIFIER, self._task, None, sandbox=self._sandbox)
            return Step(step.observation, True, TerminalReason.ENV_FAILURE, comps, {**step.info, **info})
        return step

    def _grade(self, code: str) -> Step:
        self._done = True
        try:
            comps, info = grade(VERIFIER, self._task, code, sandbox=self._sandbox)
        except RuntimeError as err:  # the verifier raises only when the sandbox itself failed
            return Step(None, True, TerminalReason.INFRA_FAILURE, {},
                        {"tool": "answer", "tool_status": "crash", "infra_error": str(err)[:200]})
        return Step(None, True, TerminalReason.EOS, comps, {"tool": "answer", "invalid_action": False, **info})

    def state_hash(self) -> str:
        payload = {"task": self._task.id if self._task else None, "runs": getattr(self, "_runs", [])}
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]


def _invalid(why: str) -> Step:
    return Step(f"<error>invalid_action: {why}</error>\n", info={"invalid_action": True})


def make_expert(error_rate: float = 0.2, draft_error_rate: float = 0.3
                ) -> Callable[[Task, list[str], random.Random], str]:
    """A programmer who knows the reference solution. On the first turn it draws once: with
    probability `error_rate` it submits the task's plausible bug without testing (always fails some
    hidden test); with probability `draft_error_rate` it runs the bug first, reads the failure and
    runs the fix; otherwise it runs the reference. After a passing run it submits what passed.
    A cloned model thus sees the tool catch bugs, and keeps a habit of untested submissions that
    RL can remove. Success rate: 1 − error_rate."""

    def expert(task: Task, observations: list[str], rng: random.Random, *, error_rate: float = error_rate) -> str:
        ref, bug = task.metadata["reference"], task.metadata["buggy"]
        if not observations:
            u = rng.random()
            if u < error_rate:
                return f"<answer>{bug}</answer>"
            return f"<run>{bug if u < error_rate + draft_error_rate else ref}</run>"
        if observations[-1].startswith("<output>pass"):
            return f"<answer>{ref}</answer>"
        return f"<run>{ref}</run>"

    return expert

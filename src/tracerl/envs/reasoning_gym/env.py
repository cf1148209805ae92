"""The reasoning_gym environment: problems from the `reasoning-gym` package with a calculator tool,
scored by the package's own scorers behind tracerl's guards (see `families.py`).

Grammar: each turn is `<calc>expression</calc>` (the exact value comes back in `<result>…</result>`;
+ - * / ( ), integers and unary minus, at most `CALC_BUDGET` calls) or `<answer>…</answer>` (the
episode ends, `eos`). The `correct` component is 1 only when the guard admits the answer and the
package scorer returns 1.0; partial scores the package gives (e.g. 0.01 for any well-formed 24-point
attempt, 0.5 for `' -4 '`) are kept in `info` and never become reward. A malformed turn, a malformed
expression or a call over budget is an invalid action; the `MAX_INVALID`-th ends the episode as
`env_failure` (`correct` 0). A scorer that raises is a tool fault (`infra_failure`).
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
from tracerl.envs.grammar import parse_tagged
from tracerl.envs.reasoning_gym.families import calc, calc_expression, wrong_answer
from tracerl.envs.reasoning_gym.verifier import NAME as VERIFIER, dataset, require_package, score  # noqa: F401

NAME = "reasoning_gym"
REVISION = "reasoning_gym-env-2"  # 2: the <calc> tool; MAX_INVALID
CALC_BUDGET = 3
MAX_INVALID = 2
SYSTEM = ("Solve the problem. To compute, write <calc>expression</calc> with + - * / ( ); the value comes "
          "back in <result></result>. Give only the final answer as <answer>…</answer>.")


class ReasoningGymEnv:
    name = NAME
    revision = REVISION

    def __init__(self, scorer: Callable[[str, int, str, dict], tuple[float, dict]] = score,
                 calc_budget: int = CALC_BUDGET, max_invalid: int | None = MAX_INVALID) -> None:
        self._score = scorer
        self.calc_budget = calc_budget
        self.max_invalid = max_invalid
        self._task: Task | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self._task = task
        self._done = False
        self._answer: str | None = None
        self._calls: list[str] = []
        self._invalid = 0
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.prompt}]

    def step(self, action_text: str) -> Step:
        assert self._task is not None, "call reset() before step()"
        if self._done:
            return Step("<error>invalid_action: the episode has ended</error>\n", info={"invalid_action": True})
        action = parse_tagged(action_text, ("calc", "answer"))
        if action.kind == "invalid":
            return self._invalid_step(action.reason)
        if action.kind == "calc":
            return self._calc(action.body)
        self._done = True
        self._answer = action.body
        try:
            comps, info = grade(VERIFIER, self._task, action.body, scorer=self._score)
        except Exception as err:  # the scorer is infrastructure; its crash is never the policy's reward
            return Step(None, True, TerminalReason.INFRA_FAILURE, {},
                        {"infra_error": f"{type(err).__name__}: {err}"})
        return Step(None, True, TerminalReason.EOS, comps, {"invalid_action": False, "calls": len(self._calls), **info})

    def _calc(self, expr: str) -> Step:
        if len(self._calls) >= self.calc_budget:
            return self._invalid_step(f"calc budget of {self.calc_budget} is spent; answer now")
        try:
            value, status = calc(expr), "ok"
        except ValueError as err:
            return self._invalid_step(str(err))
        except ZeroDivisionError:
            value, status = "error: division by zero", "error"
        self._calls.append(expr)
        return Step(f"<result> {value}</result>\n", info={"tool": "calc", "tool_status": status, "invalid_action": False})

    def _invalid_step(self, why: str) -> Step:
        self._invalid += 1
        obs = f"<error>invalid_action: {why}</error>\n"
        if self.max_invalid is not None and self._invalid >= self.max_invalid:
            self._done = True
            comps, info = grade(VERIFIER, self._task, None, scorer=self._score)
            return Step(obs, True, TerminalReason.ENV_FAILURE, comps, {"invalid_action": True, **info})
        return Step(obs, info={"invalid_action": True})

    def state_hash(self) -> str:
        payload = {"task": self._task.id if self._task else None, "calls": self._calls, "answer": self._answer}
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]


def make_expert(error_rate: float = 0.2) -> Callable[[Task, list[str], random.Random], str]:
    """Works with the calculator: types the problem's expression (an equation's solution as an
    expression of its numbers, the 24-point reference to check it), then answers with the package's
    reference answer. With probability `error_rate` (drawn on the first turn) it answers at once,
    from memory, with a plausible wrong answer (off by one or two, or a 24-point expression that
    misses 24): the habit a model that imitates it keeps, and RL has to remove."""

    def expert(task: Task, observations: list[str], rng: random.Random, *, error_rate: float = error_rate) -> str:
        meta = task.metadata
        if not observations:
            if rng.random() < error_rate:
                return f"<answer>{wrong_answer(meta['family'], meta['entry'], rng)}</answer>"
            return f"<calc>{calc_expression(meta['family'], meta['entry'])}</calc>"
        return f"<answer>{meta['entry']['answer']}</answer>"

    return expert

"""Arithmetic word problems with a Python tool (the ReTool / rStar2-Agent pattern in miniature).

The policy may run `<code>python</code>` (executed in the sandbox; stdout comes back as
`<output>…</output>`) and must end with `<answer>integer</answer>`. Reward components:
`correct` (the answer equals the task's, exact integer match) and `format` (the episode ended
with a well-formed answer). A sandbox fault ends the episode as `infra_failure`.
"""

from __future__ import annotations

import hashlib
import random
import re

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._verify import grade
from tracerl.envs.base import Message, Step
from tracerl.envs.grammar import parse_tagged
from tracerl.envs.math_tool.verifier import NAME as VERIFIER, check_answer

SYSTEM = "Use <code> to compute. Give the number in <answer>."
TAGS = ("code", "answer")
REVISION = "math_tool-env-1"
__all__ = ["MathToolEnv", "REVISION", "VERIFIER", "check_answer", "expert", "expert_plan", "slipped"]


class MathToolEnv:
    name = "math_tool"
    revision = REVISION

    def __init__(self, sandbox=None, limits=None):
        self._sandbox, self._limits = sandbox, limits
        self.task: Task | None = None
        self.history: list[str] = []

    def reset(self, task: Task, seed: int) -> list[Message]:
        self.task, self.history = task, []
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": str(task.prompt)}]

    def state_hash(self) -> str:
        return hashlib.sha256(repr((self.task.id if self.task else None, self.history)).encode()).hexdigest()[:16]

    def step(self, action_text: str) -> Step:
        action = parse_tagged(action_text, TAGS)
        self.history.append(action_text)
        if action.kind == "invalid":
            return Step(observation=f"<output>invalid_action: {action.reason}</output>",
                        info={"invalid_action": True, "reason": action.reason})
        if action.kind == "answer":
            comps, info = grade(VERIFIER, self.task, action.body)
            return Step(terminated=True, terminal_reason=TerminalReason.EOS,
                        reward_components=comps, info={"answer": action.body, **info})
        return self._run_code(action.body)

    def _run_code(self, code: str, *, tagged: bool = True) -> Step:
        """Run `code` in the sandbox; stdout comes back in `<output>` (tagged) or bare (native tool mode,
        where the chat template's tool role wraps it)."""
        from tracerl.sandbox import Limits, default_sandbox

        sandbox = self._sandbox or default_sandbox()
        limits = self._limits or Limits(cpu_s=1.0, wall_s=2.0, memory_bytes=256 << 20, output_bytes=2000)
        try:
            res = sandbox.run(code, limits=limits)
        except Exception as err:  # the sandbox itself failed: never a policy outcome
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                        info={"tool": "python", "tool_status": "crash", "error": repr(err)})
        if res.status == "crash":
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                        info={"tool": "python", "tool_status": "crash", "error": (res.reason or res.stderr)[-200:],
                              "sandbox_attempts": res.attempts})
        if res.status == "ok":
            out = res.stdout.strip()[:200]
        else:
            last = (res.stderr.strip().splitlines() or [res.status])[-1]
            out = f"{res.status}: {last[:120]}"
        return Step(observation=f"<output>{out}</output>" if tagged else out,
                    info={"tool": "python", "tool_status": res.status, "tool_latency_s": res.wall_s})


def slipped(program: str) -> str:
    """`program` with its last closing parenthesis dropped: the SyntaxError a demonstration recovers from."""
    i = program.rfind(")")
    return program[:i] + program[i + 1:] if i >= 0 else program + ")"


def expert_plan(task: Task, rng: random.Random, tool_rate: float, error_rate: float) -> tuple[bool, bool]:
    """(uses the tool, its first call slips), seeded per task; one draw from `rng` whatever the rates."""
    own = random.Random(f"{task.id}:{rng.random()}")
    uses_tool = own.random() < tool_rate
    return uses_tool, uses_tool and error_rate > 0 and own.random() < error_rate


def expert(task: Task, observations: list[str], rng: random.Random, *, tool_rate: float = 0.5,
           error_rate: float = 0.0) -> str:
    """A teacher that computes in its head (always right) or with the tool, at `tool_rate`.

    The tiny student cannot imitate mental arithmetic on multi-step problems, so direct answers
    fail for it: the headroom RL has to find is "use the tool". The choice is seeded per task.
    At `error_rate` (of the episodes that use the tool) the first call slips (a SyntaxError); after any
    failed call (its own slip, or a tool that errs: `faults.tool_error`) the teacher calls again once,
    then answers in its head: demonstrations of recovering from a failed call.
    """
    if not observations:
        uses_tool, slips = expert_plan(task, rng, tool_rate, error_rate)
        if uses_tool:
            program = task.metadata["program"]
            return f"<code>{slipped(program) if slips else program}</code>"
        return f"<answer>{task.answer}</answer>"
    m = re.fullmatch(r"<output>(-?\d+)</output>", observations[-1].strip())
    if m:
        return f"<answer>{m.group(1)}</answer>"
    if len(observations) < 2:
        return f"<code>{task.metadata['program']}</code>"
    return f"<answer>{task.answer}</answer>"

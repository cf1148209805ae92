"""math_tool in native tool mode (`env.tool_format: native`, recipe `math_tool_native`).

The same problems, verifier and sandbox, but the policy calls a `python` tool the way chat models are
trained to: through its chat template's tool schemas, in its family's call format (`env.tool_parser`;
Hermes: `<tool_call>\\n{"name": "python", "arguments": {"code": "..."}}\\n</tool_call>`). The tool's
schema is built from the Python function below (signature + docstring); its body runs the code in the
sandbox (the grammar mode's `<code>` path, `MathToolEnv._run_code`), so a sandbox crash is still an
infra_failure, and its stdout comes back in the template's `tool` role. A turn without a call is the
final answer: the message's text must be the integer alone (the math_tool verifier, exact match). A
malformed call is fed back as `invalid_action: <why>` in the tool role.
"""

from __future__ import annotations

import dataclasses
import functools
import random

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._verify import grade
from tracerl.envs.base import Message, Step
from tracerl.envs.math_tool.env import VERIFIER, MathToolEnv, expert_plan, slipped
from tracerl.envs.native_tools import NativeTools, ToolCall, ToolSet, get_parser

SYSTEM = "Use the python tool to compute. Reply with the number alone."


def python(code: str) -> str:
    """Run a Python program in a sandbox and return what it prints.

    Args:
        code: The program; print the result.
    """
    raise RuntimeError("bound to an environment's sandbox by MathToolNativeEnv")


class MathToolNativeEnv:
    name = "math_tool"

    def __init__(self, parser: str = "hermes", revision: str = "", sandbox=None, limits=None):
        self.base = MathToolEnv(sandbox=sandbox, limits=limits)
        self.revision = revision
        run = functools.partial(self.base._run_code, tagged=False)
        self.native_tools = NativeTools(get_parser(parser), ToolSet([python], implementations={"python": run}))

    def reset(self, task: Task, seed: int) -> list[Message]:
        self.base.reset(task, seed)
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": str(task.prompt)}]

    def state_hash(self) -> str:
        return self.base.state_hash()

    def step(self, action_text: str) -> Step:
        self.base.history.append(action_text)
        turn = self.native_tools.parser.parse(action_text)
        if turn.error:
            return Step(observation=f"invalid_action: {turn.error}", info={"invalid_action": True, "reason": turn.error})
        if not turn.calls:  # no call: the final answer
            comps, info = grade(VERIFIER, self.base.task, turn.content)
            return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components=comps,
                        info={"answer": turn.content[:200], **info})
        return self.native_tools.tools.execute(turn.calls[0])


def expert(task: Task, observations: list[str], rng: random.Random, *, parser: str = "hermes",
           tool_rate: float = 0.5, error_rate: float = 0.0) -> str:
    """The grammar expert's choices (tool at `tool_rate`, seeded per task; a first call that slips at
    `error_rate`, then one retry after any failed call) written as native tool calls."""
    program = task.metadata["program"]
    if not observations:
        uses_tool, slips = expert_plan(task, rng, tool_rate, error_rate)
        if uses_tool:
            return get_parser(parser).format_calls([ToolCall("python", {"code": slipped(program) if slips else program})])
        return str(task.answer)
    out = observations[-1].strip()
    if out.lstrip("-").isdigit():
        return out
    if len(observations) < 2:
        return get_parser(parser).format_calls([ToolCall("python", {"code": program})])
    return str(task.answer)


def native_spec(spec, parser: str):
    """math_tool's spec in native mode with `parser`'s call format."""
    tags = MathToolNativeEnv(parser).native_tools.tiny_tokenizer_tags()
    revision = f"{spec.revision}+native-{parser}"
    return dataclasses.replace(
        spec, revision=revision, make=functools.partial(MathToolNativeEnv, parser=parser, revision=revision),
        expert=functools.partial(expert, parser=parser), stop_strings=get_parser(parser).stop_strings, special_tokens=tags,
        description=spec.description + f" Native tool calls ({parser}).")

"""`calc_json`: arithmetic word problems with a calculator called through JSON tool calls.

The math_tool problems, but the tool is a calculator (`+ - * / ( )`, exact values) called in the
JSON tool-call grammar of `envs/json_tools.py`:
`<tool_call>{"name": "calculator", "arguments": {"expression": "23+4*17"}}</tool_call>`; its
result comes back as `<tool_response>91</tool_response>`. The policy ends with
`<answer>integer</answer>`. The tool is listed in the system message exactly as the gateway
(`tracerl serve`) lists an OpenAI `tools` entry for a chat template without tool support, so an
agent written against the OpenAI client (examples/gateway_agent/) sees the same tokens as this env's
demonstrations. Reward components: `correct` (exact integer) and `format` (a well-formed answer).
"""

from __future__ import annotations

import hashlib
import random
import re

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._audit import register as register_audit_set
from tracerl.envs._verify import grade
from tracerl.envs.base import EnvSpec, Message, Step, register_env
from tracerl.envs.calc_json.verifier import NAME as VERIFIER, score
from tracerl.envs.json_tools import TAGS, format_tool_call, format_tool_result, parse_tool_calls, tools_system_prompt
from tracerl.envs.math_tool.generator import generate as math_generate
from tracerl.envs.reasoning_gym.families import calc

REVISION = "calc_json-env-1"
INSTRUCTIONS = "Use the calculator tool to compute. Give the number in <answer></answer>."
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression (+ - * / and parentheses).",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
TOOLS = [CALCULATOR]
SYSTEM = tools_system_prompt(INSTRUCTIONS, TOOLS)


def program_to_expression(program: str) -> str:
    """`x=23;x+=4*17;x*=2;print(x)` -> `(23+4*17)*2` (the same value, one expression)."""
    expr = ""
    for stmt in program.split(";"):
        if stmt.startswith("x="):
            expr = stmt[2:]
        elif stmt.startswith("x+="):
            expr = f"{expr}+{stmt[3:]}"
        elif stmt.startswith("x-="):
            expr = f"{expr}-{stmt[3:]}"
        elif stmt.startswith("x*="):
            expr = f"({expr})*{stmt[3:]}"
    return expr


def generate(split: str = "train", n: int = 100, seed: int = 0, difficulty=(0.0, 1.0)) -> list[Task]:
    """math_tool problems without "multiplied by" steps, so the expression is a left-to-right
    transcription of the text (`23+4*17-5`) with no parenthesis to plan ahead."""
    out, k = [], 0
    while len(out) < n:
        out += [t for t in math_generate(split, 2 * n + k, seed, difficulty) if "x*=" not in t.metadata["program"]]
        out = list({t.id: t for t in out}.values())
        k += n
    return [_task(t) for t in out[:n]]


def _task(t: Task) -> Task:
    meta = {**t.metadata, "expression": program_to_expression(t.metadata["program"])}
    return Task(id=t.id.replace("math-", "calc-"), source="calc_json", source_revision=REVISION + "/" + t.source_revision,
                split=t.split, prompt=t.prompt, answer=t.answer, difficulty=t.difficulty, metadata=meta)


class CalcJsonEnv:
    name = "calc_json"
    revision = REVISION

    def __init__(self):
        self.task: Task | None = None
        self.history: list[str] = []

    def reset(self, task: Task, seed: int) -> list[Message]:
        self.task, self.history = task, []
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": str(task.prompt)}]

    def state_hash(self) -> str:
        return hashlib.sha256(repr((self.task.id if self.task else None, self.history)).encode()).hexdigest()[:16]

    def step(self, action_text: str) -> Step:
        self.history.append(action_text)
        turn = parse_tool_calls(action_text)
        if turn.error:
            return Step(observation=format_tool_result(f"invalid_action: {turn.error}"),
                        info={"invalid_action": True, "reason": turn.error})
        if not turn.calls:  # no tool call: the final answer
            comps, info = grade(VERIFIER, self.task, action_text)
            return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components=comps, info=info)
        call = turn.calls[0]
        if call.name != "calculator" or not isinstance(call.arguments.get("expression"), str):
            why = 'call the "calculator" tool with a string "expression"'
            return Step(observation=format_tool_result(f"invalid_action: {why}"),
                        info={"invalid_action": True, "reason": why, "tool": call.name})
        result = calculator(call.arguments["expression"])
        return Step(observation=format_tool_result(result),
                    info={"tool": "calculator", "tool_status": "error" if result.startswith("error") else "ok"})


def calculator(expression: str) -> str:
    """The tool: the exact value, or `error: ...` (never an exception)."""
    try:
        return calc(expression)
    except (ValueError, ZeroDivisionError) as err:
        return f"error: {err}"


def expert(task: Task, observations: list[str], rng: random.Random, *, tool_rate: float = 0.5) -> str:
    """Calls the calculator at `tool_rate` (seeded per task), else answers in its head (always right)."""
    if not observations:
        if random.Random(f"{task.id}:{rng.random()}").random() < tool_rate:
            return format_tool_call("calculator", {"expression": task.metadata["expression"]})
        return f"<answer>{task.answer}</answer>"
    m = re.search(r"<tool_response>(.*)</tool_response>", observations[-1], flags=re.DOTALL)
    return f"<answer>{m.group(1).strip() if m else task.answer}</answer>"


SPEC = register_env(EnvSpec(
    name="calc_json", revision=REVISION, make=CalcJsonEnv, generate=generate, expert=expert,
    reward_weights={"correct": 1.0, "format": 0.0}, stop_strings=("</tool_call>", "</answer>"),
    special_tokens=(*TAGS, "<answer>", "</answer>"), tools=("calculator",),
    description="Arithmetic word problems with a calculator called through JSON tool calls (the gateway agent's env).",
    verifier=VERIFIER,
))


def _audit_cases() -> list[dict]:
    from tracerl.envs.calc_json.audit import audit_cases

    return audit_cases()


audit = register_audit_set(SPEC, _audit_cases)

__all__ = ["CALCULATOR", "SPEC", "SYSTEM", "TOOLS", "CalcJsonEnv", "calculator", "expert", "generate", "score"]

"""`dataset` with tools: multi-turn episodes with native tool calls over a `reward:` recipe's rows.

`reward.tools` (and `reward.code_tools`) name Python functions as `module:function`, looked up like
`reward.funcs`. Their schemas come from their signatures and Google-style docstrings (or a JSON-schema
dict in the module), the prompt is rendered with them through the model's chat template, each policy
turn is read by `env.tool_parser` (envs/native_tools/: the machinery of math_tool's native mode, the
same run-start conformance check), the first call of a turn is executed and its result goes back in
the template's `tool` role. The episode ends at a turn without a call (the final answer: every reward
function scores it), at env.max_turns or at the token budget (a truncation: the functions are not
called; the recipe's rl.truncation applies).

The reward functions get `completions` as the episode's messages after the prompt, as TRL passes
conversational completions: `{"role": "assistant", "content": ..., "tool_calls": [...]}` for a call
turn, `{"role": "tool", "name": ..., "content": ...}` for its result, `{"role": "assistant", "content":
...}` for the final answer. A function may also name `tool_calls` (the episode's calls, each
`{"name", "arguments", "result", "status"}`) and `messages` (prompt messages + completions).

A plain tool (`def` or `async def`) runs in-process within `reward.timeout_s` (a call past it, or one that raises, is an
`error: ...` result the policy sees; the thread of a timed-out call finishes in the background). A
code tool's function returns a Python program built from its arguments; the sandbox runs it with
math_tool's limits and what it prints is the result (a sandbox crash ends the episode as infra_failure).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs.base import Message, Step
from tracerl.envs.native_tools import NativeTools, ToolSet, get_parser, sample_call, tool_schema
from tracerl.errors import UserError
from tracerl.verifiers.reward_funcs import CallFailed, CallTimeout, RewardCallError, _load_module, _source_revision, run_in_thread

EXTRA_ARGS = ("tool_calls", "messages")  # what a reward function may name besides the columns, with tools


@dataclasses.dataclass(frozen=True)
class ResolvedTool:
    name: str  # the tool's name in its schema
    target: str  # `module:function` or `/abs/path.py:function`, as resolved
    schema: dict
    fn: Callable
    revision: str  # sha256 of the implementation's source, first 12 hex
    code: bool  # runs the program it returns in the sandbox


def _schema_of(target: str, obj, mod) -> tuple[dict, Callable]:
    """(schema, implementation) of a resolved attribute: a function, or a JSON schema + its module's function."""
    if isinstance(obj, dict):
        try:
            schema = tool_schema(obj)
        except ValueError as err:
            raise UserError(f"tool {target!r} is not an OpenAI tool schema ({err})") from None
        name = schema["function"]["name"]
        fn = getattr(mod, name, None)
        if not callable(fn):
            raise UserError(f"tool schema {target!r} names {name!r}, but its module defines no function {name!r} to run "
                            "it; define one or list the function itself")
        return schema, fn
    if not callable(obj):
        raise UserError(f"tool {target!r} is neither a function nor a JSON schema dict; point it at a def")
    try:
        return tool_schema(obj), obj
    except Exception as err:  # transformers' TypeHintParsingException / DocstringParsingException
        raise UserError(f"tool {target!r} cannot give a JSON schema ({str(err).splitlines()[0][:160]}); give every "
                        "parameter a type hint and the function a docstring with an Args: line per parameter") from None


def resolve_tools(tools: Sequence[str], code_tools: Sequence[str] = (), search: Sequence[Path] = ()) -> list[ResolvedTool]:
    """The recipe's `reward.tools` then `reward.code_tools` as `ResolvedTool`s (checked: one sentence each)."""
    search = [Path(d) for d in search] + [Path.cwd()]
    out: list[ResolvedTool] = []
    for key, targets in (("reward.tools", tools), ("reward.code_tools", code_tools)):
        for target in targets:
            module, sep, attr = target.rpartition(":")
            if not sep or not module or not attr:
                raise UserError(f"{key} entry {target!r} must look like module:function or file.py:function")
            mod, where = _load_module(module, search, key)
            obj = getattr(mod, attr, None)
            if obj is None:
                known = sorted(k for k, v in vars(mod).items() if inspect.isfunction(v) and not k.startswith("_"))
                raise UserError(f"{where} has no tool {attr!r}" + (f"; it defines {', '.join(known)}" if known else ""))
            schema, fn = _schema_of(target, obj, mod)
            resolved = f"{where}:{attr}" if where.endswith(".py") else target
            out.append(ResolvedTool(schema["function"]["name"], resolved, schema, fn, _source_revision(fn),
                                    key == "reward.code_tools"))
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise UserError(f"reward.tools and reward.code_tools name two tools alike ({names}); give each its own name")
    return out


def _call_in_thread(name: str, fn: Callable, kwargs: dict, timeout_s: float):
    """`fn(**kwargs)` within `timeout_s` (an `async def` tool awaited); RewardCallError when it raises or runs past it."""
    try:
        return run_in_thread(fn, kwargs, timeout_s, f"tracerl-tool-{name}")
    except CallTimeout:
        raise RewardCallError(f"timeout: tool {name} ran past {timeout_s:g} s") from None
    except CallFailed as failed:
        raise RewardCallError(f"error: {type(failed.error).__name__}: {failed.error}") from None


def _run_program(name: str, program: str, sandbox=None, limits=None) -> Step:
    """A code tool's program in the sandbox, with math_tool's limits; stdout is the result."""
    from tracerl.sandbox import Limits, default_sandbox

    sandbox = sandbox or default_sandbox()
    limits = limits or Limits(cpu_s=1.0, wall_s=2.0, memory_bytes=256 << 20, output_bytes=2000)
    try:
        res = sandbox.run(program, limits=limits)
    except Exception as err:  # the sandbox itself failed: never a policy outcome
        return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                    info={"tool": name, "tool_status": "crash", "error": repr(err)[:200]})
    if res.status == "crash":
        return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                    info={"tool": name, "tool_status": "crash", "error": (res.reason or res.stderr)[-200:]})
    out = res.stdout.strip()[:200] if res.status == "ok" else \
        f"{res.status}: {(res.stderr.strip().splitlines() or [res.status])[-1][:120]}"
    return Step(observation=out, info={"tool": name, "tool_status": res.status, "tool_latency_s": res.wall_s})


def _implementation(tool: ResolvedTool, timeout_s: float) -> Callable:
    """What `ToolSet.execute` calls: the function within `timeout_s` (a code tool: then its program in the
    sandbox). `functools.wraps` keeps the signature, so `execute` still binds the policy's arguments to it."""

    @functools.wraps(tool.fn)
    def run(**kwargs):
        try:
            out = _call_in_thread(tool.name, tool.fn, kwargs, timeout_s)
        except RewardCallError as err:
            status = str(err).partition(":")[0]
            return Step(observation=str(err)[:300], info={"tool": tool.name, "tool_status": status})
        if not tool.code:
            return out if isinstance(out, Step) else Step(observation=str(out), info={"tool": tool.name, "tool_status": "ok"})
        if not isinstance(out, str):
            return Step(observation=f"error: code tool {tool.name} built no program (got {type(out).__name__})",
                        info={"tool": tool.name, "tool_status": "error"})
        return _run_program(tool.name, out)

    return run


def native_tools(tools: Sequence[ResolvedTool], parser: str, timeout_s: float) -> NativeTools:
    """The recipe's tools as the native-mode tool set: schemas for the template, bounded implementations."""
    impl = {t.name: _implementation(t, timeout_s) for t in tools}
    return NativeTools(get_parser(parser), ToolSet([t.schema for t in tools], implementations=impl))


def tools_revision(tools: Sequence[ResolvedTool], parser: str) -> str:
    key = ";".join(f"{t.name}={t.target}@{t.revision}{'+code' if t.code else ''}" for t in tools) + f";{parser}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


class DatasetToolEnv:
    """One row, a conversation with tools, the reward functions' scores of the whole episode."""

    def __init__(self, verifier, native: NativeTools, *, name: str, revision: str, first_messages: Callable):
        self.verifier, self.native_tools = verifier, native
        self.name, self.revision, self.first_messages = name, revision, first_messages
        self.task: Task | None = None
        self.prompt: list[Message] = []
        self.completion: list[dict] = []
        self.calls: list[dict] = []

    def reset(self, task: Task, seed: int) -> list[Message]:
        self.task, self.completion, self.calls = task, [], []
        self.prompt = self.first_messages(task)
        return [dict(m) for m in self.prompt]

    def state_hash(self) -> str:
        key = (self.task.id if self.task else None, json.dumps(self.completion, sort_keys=True, default=str))
        return hashlib.sha256(repr(key).encode()).hexdigest()[:16]

    def step(self, action_text: str) -> Step:
        turn = self.native_tools.parser.parse(action_text)
        if turn.error:  # a malformed call: the policy sees why, in the tool role, and the turn is spent
            obs = f"invalid_action: {turn.error}"
            self.completion += [{"role": "assistant", "content": action_text.strip()}, {"role": "tool", "content": obs}]
            return Step(observation=obs, info={"invalid_action": True, "reason": turn.error})
        if not turn.calls:  # no call: the final answer, scored with the whole episode
            self.completion.append({"role": "assistant", "content": turn.content})
            return self._score()
        call = turn.calls[0]  # one call per turn is executed (as in math_tool's native mode)
        step = self.native_tools.tools.execute(call)
        self.completion.append({"role": "assistant", "content": turn.content, "tool_calls": [
            {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}]})
        if step.observation is not None:
            self.completion.append({"role": "tool", "name": call.name, "content": step.observation})
        status = step.info.get("tool_status", "invalid_action" if step.info.get("invalid_action") else None)
        self.calls.append({"name": call.name, "arguments": call.arguments, "result": step.observation, "status": status})
        return step

    def _score(self) -> Step:
        ident = {"verifier": self.verifier.name, "verifier_revision": self.verifier.revision}
        extra = {"tool_calls": list(self.calls), "messages": [*self.prompt, *self.completion]}
        info = {"tool_calls": len(self.calls), **ident}
        try:
            comps, raw = self.verifier.score(self.task, list(self.completion), extra)
        except RewardCallError as err:  # an infrastructure fault of this row, never a reward of 0
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE, info={"infra": str(err), **info})
        return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components=comps, info={**raw, **info})


def check_stop_strings(stop_strings: Sequence[str], native: NativeTools) -> None:
    """A reward.stop_strings entry that occurs inside a tool call would cut every call short: refused."""
    call = native.parser.format_calls([sample_call(native)])
    for s in stop_strings:
        if s and s in call.removesuffix(s):
            raise UserError(f"reward.stop_strings entry {s!r} occurs inside a {native.parser.name} tool call "
                            f"({call[:60]!r}), so it would end every call early; drop it (with tools a final answer "
                            "ends at the end-of-turn token)")


__all__ = ["DatasetToolEnv", "EXTRA_ARGS", "ResolvedTool", "check_stop_strings", "native_tools", "resolve_tools",
           "tools_revision"]

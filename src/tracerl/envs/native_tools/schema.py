"""Tools as Python callables or JSON schemas, and calling them from a parsed tool call.

A callable's schema comes from its signature and Google-style docstring through transformers'
`get_json_schema` (the schema `apply_chat_template(tools=[fn])` itself builds), so what the template
shows the model is what `ToolSet.execute` accepts. A JSON schema is an OpenAI tool entry
(`{"type": "function", "function": {"name", "description", "parameters"}}`) or its bare `function`
part; a schema without a callable is listed to the model but has no implementation here, so the
environment must handle its calls itself (`ToolSet.execute` reports it as an unknown tool).

A tool returns a string (the result fed back in the `tool` role) or a `Step` (full control: an
environment's sandboxed code tool returns the sandbox's verdict, a crash ending the episode as
infra_failure). An unknown tool, arguments that do not bind to the signature, or an exception in the
tool is an `invalid_action` / `error` result the policy sees, never a crash of the run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from tracerl.envs.base import Step
from tracerl.envs.json_tools import ToolCall


def tool_schema(tool) -> dict:
    """The OpenAI tool entry of a callable (signature + docstring) or of a JSON schema (checked)."""
    if callable(tool) and not isinstance(tool, dict):
        from transformers.utils import get_json_schema

        return get_json_schema(tool)
    if not isinstance(tool, dict):
        raise ValueError(f"a tool is a Python callable or a JSON schema dict, got {type(tool).__name__}")
    fn = tool.get("function", tool) if tool.get("type", "function") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError('a tool schema needs {"type": "function", "function": {"name": ..., "parameters": {...}}}')
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict) or params.get("type") != "object":
        raise ValueError(f'tool {fn["name"]!r}: "parameters" must be a JSON schema of type "object"')
    return {"type": "function", "function": {**fn, "parameters": params}}


class ToolSet:
    """Named tools: their schemas (for the chat template) and implementations (for `execute`)."""

    def __init__(self, tools: list, *, implementations: dict[str, Callable] | None = None):
        self.schemas: list[dict] = []
        self.impl: dict[str, Callable] = dict(implementations or {})
        for t in tools:
            schema = tool_schema(t)
            name = schema["function"]["name"]
            if any(s["function"]["name"] == name for s in self.schemas):
                raise ValueError(f"two tools are named {name!r}; give each tool its own name")
            self.schemas.append(schema)
            if callable(t) and not isinstance(t, dict):
                self.impl.setdefault(name, t)

    @property
    def names(self) -> list[str]:
        return [s["function"]["name"] for s in self.schemas]

    def execute(self, call: ToolCall) -> Step:
        """The tool's result as an env step (never raises for the policy's mistakes)."""
        fn = self.impl.get(call.name)
        if fn is None:
            why = f"unknown tool {call.name!r}; call one of {', '.join(self.names)}"
            return Step(observation=f"invalid_action: {why}", info={"invalid_action": True, "reason": why,
                                                                     "tool": call.name})
        try:
            inspect.signature(fn).bind(**call.arguments)
        except TypeError as err:
            why = f"bad arguments for {call.name}: {err}"
            return Step(observation=f"invalid_action: {why}", info={"invalid_action": True, "reason": why,
                                                                     "tool": call.name})
        try:
            out = fn(**call.arguments)
        except Exception as err:  # the tool failed on these arguments: the policy sees why
            return Step(observation=f"error: {type(err).__name__}: {err}"[:300],
                        info={"tool": call.name, "tool_status": "error"})
        if isinstance(out, Step):
            return out
        return Step(observation=str(out), info={"tool": call.name, "tool_status": "ok"})

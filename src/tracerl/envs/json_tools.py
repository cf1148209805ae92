"""JSON tool calls as a grammar (the Hermes / Qwen / rStar2-Agent format).

A policy turn calls a tool by writing `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
the result comes back as `<tool_response>...</tool_response>` when the chat template has no tool
role of its own. The same functions are used by environments (the agent loop) and by the
OpenAI-compatible gateway (`tracerl.serve`), so a conversation played either way yields the same
text, and a tool call the model wrote round-trips through the OpenAI `tool_calls` field unchanged.

A malformed call is not an exception: `parse_tool_calls` returns the reason, which an environment
turns into an `invalid_action` observation and the gateway returns as plain content.
"""

from __future__ import annotations

import dataclasses
import json
import re

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
TAGS = (CALL_OPEN, CALL_CLOSE, RESPONSE_OPEN, RESPONSE_CLOSE)
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict


@dataclasses.dataclass(frozen=True)
class ParsedTurn:
    content: str  # the text outside every <tool_call> block
    calls: tuple[ToolCall, ...]
    error: str = ""  # why a <tool_call> block could not be read ("" when none failed)


def format_tool_call(name: str, arguments: dict) -> str:
    """The canonical text of one call (what the expert writes and the gateway renders back)."""
    return CALL_OPEN + json.dumps({"name": name, "arguments": arguments}) + CALL_CLOSE


def format_tool_result(content: str) -> str:
    """A tool's result as inline text, for chat templates without a tool role."""
    return RESPONSE_OPEN + content + RESPONSE_CLOSE


def parse_tool_calls(text: str) -> ParsedTurn:
    """Every `<tool_call>` block of a turn; an unreadable block is reported, not raised."""
    calls, errors = [], []
    for m in _CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except json.JSONDecodeError as err:
            errors.append(f"tool call is not JSON ({err.msg} at character {err.pos})")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append('a tool call is a JSON object with a string "name" and an object "arguments"')
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                errors.append("tool call arguments are neither an object nor a JSON string of one")
                continue
        if not isinstance(args, dict):
            errors.append('tool call "arguments" must be a JSON object')
            continue
        calls.append(ToolCall(obj["name"], args))
    if CALL_OPEN in text and not calls and not errors:
        errors.append(f"a {CALL_OPEN} block is not closed by {CALL_CLOSE}")
    content = _CALL.sub("", text).strip()
    return ParsedTurn(content, tuple(calls), "; ".join(errors))


def tools_system_prompt(system: str, tools: list[dict]) -> str:
    """A system message that lists the tools, for chat templates that do not render `tools` themselves.

    `tools` are OpenAI tool entries (`{"type": "function", "function": {...}}`); each function is one
    JSON line, so the text depends only on the schemas.
    """
    lines = [json.dumps(t.get("function", t)) for t in tools]
    head = f"{system}\n\n" if system else ""
    return (head + f"Tools (call one as {CALL_OPEN}{{\"name\": ..., \"arguments\": {{...}}}}{CALL_CLOSE}):\n"
            + "\n".join(lines))

"""`tool_choice` and `response_format` to the `Pattern` a call's samples must spell (serve/constraints.py).

| field | honoured by |
| --- | --- |
| `tool_choice: "auto"` (or absent) | nothing: the model may answer or call a tool |
| `tool_choice: "none"` | no sample can contain `<tool_call>`; no tool calls are parsed |
| `tool_choice: "required"` | every sample is one tool call to one of `tools`, arguments a JSON object |
| `tool_choice: {"type": "function", "function": {"name": N}}` | every sample is one call to `N` |
| `response_format: {"type": "json_object"}` | every sample is one JSON object |
| `response_format: {"type": "text"}` | nothing (the default) |

A `json_schema` format, a forced tool call together with a JSON format, a tool that is not a
function, or a named function that is not among `tools` is refused with a 400 naming it.
"""

from __future__ import annotations

from tracerl.serve.constraints import Pattern, json_object_pattern, no_tool_call_pattern, tool_call_pattern
from tracerl.serve.errors import bad_request


def tool_names(tools: list[dict] | None) -> list[str]:
    names = []
    for t in tools or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str):
            raise bad_request("every entry of 'tools' must be {'type': 'function', 'function': {'name': ..., "
                              "'parameters': {...}}}; this gateway serves function tools only", param="tools")
        names.append(fn["name"])
    return names


def _json_format(response_format) -> bool:
    if response_format is None:
        return False
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind in (None, "text"):
        if kind is None:
            raise bad_request("'response_format' needs a 'type': 'text' or 'json_object'", param="response_format")
        return False
    if kind == "json_object":
        return True
    if kind == "json_schema":
        raise bad_request("'response_format' json_schema is not supported (only JSON syntax is enforced, not a "
                          "schema); send {'type': 'json_object'} and check the schema yourself", param="response_format")
    raise bad_request(f"'response_format' type {kind!r} is unknown; use 'text' or 'json_object'", param="response_format")


def pattern_for(tools: list[dict] | None, tool_choice, response_format) -> Pattern | None:
    """The constraint of a call, or None when it samples freely."""
    names = tool_names(tools)
    json_out = _json_format(response_format)
    if tool_choice in (None, "auto"):
        return json_object_pattern() if json_out else None
    if tool_choice == "none":
        return json_object_pattern() if json_out else no_tool_call_pattern()
    if json_out:
        raise bad_request("a forced tool call and response_format json_object cannot both hold; drop one",
                          param="response_format")
    if tool_choice == "required":
        if not names:
            raise bad_request("tool_choice 'required' needs 'tools'; send the functions the model may call",
                              param="tool_choice")
        return tool_call_pattern(names)
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name") if "function" in tool_choice else tool_choice.get("name")
        if name not in names:
            raise bad_request(f"tool_choice names the function {name!r}, which is not among 'tools' ({names}); "
                              "name one of them", param="tool_choice")
        return tool_call_pattern([name])
    raise bad_request("'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'function': "
                      "{'name': ...}}", param="tool_choice")

"""Model-family tool-call parsers: one policy turn's text -> the calls it makes, in the family's own format.

Each parser knows how its family writes a call (`format_calls`: what the expert writes and what the
chat template renders for an assistant message with `tool_calls`; the run-start conformance check
holds the two equal) and how to read one back (`parse`). A malformed call is not an exception: `parse`
returns a `ParsedTurn` with `error` set, which the environment feeds back as an `invalid_action`
tool result.

- hermes (Hermes 2 Pro, Qwen 2.5/3, SmolLM3): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`,
  several blocks for several calls; the turn stops at `</tool_call>`.
- llama3 (Llama 3.1/3.2/3.3 JSON tool calling): the whole turn is one JSON object
  `{"name": ..., "parameters": {...}}`; it ends with the end-of-turn token.
- mistral (Mistral 7B v0.3, Nemo, Small): `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`; it ends
  with the end-of-turn token.
"""

from __future__ import annotations

import dataclasses
import json
import re

from tracerl.envs.json_tools import ParsedTurn, ToolCall

__all__ = ["PARSERS", "HermesParser", "Llama3Parser", "MistralParser", "ParsedTurn", "ToolCall", "get_parser"]


def _json_args(obj, key: str) -> tuple[dict | None, str]:
    """(arguments, error) of one decoded call object."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None, f'a tool call is a JSON object with a string "name" and an object "{key}"'
    args = obj.get(key, obj.get("arguments" if key != "arguments" else "parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None, f'tool call "{key}" is neither an object nor a JSON string of one'
    if not isinstance(args, dict):
        return None, f'tool call "{key}" must be a JSON object'
    return args, ""


def _loads(text: str) -> tuple[object, str]:
    try:
        return json.loads(text), ""
    except (json.JSONDecodeError, RecursionError) as err:
        where = f" ({err.msg} at character {err.pos})" if isinstance(err, json.JSONDecodeError) else ""
        return None, f"tool call is not JSON{where}"


@dataclasses.dataclass(frozen=True)
class HermesParser:
    name: str = "hermes"
    open: str = "<tool_call>"
    close: str = "</tool_call>"
    stop_strings: tuple[str, ...] = ("</tool_call>",)
    tags: tuple[str, ...] = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

    def format_calls(self, calls: list[ToolCall]) -> str:
        return "".join(f"{self.open}\n" + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
                       + f"\n{self.close}" for c in calls)

    def parse(self, text: str) -> ParsedTurn:
        calls, errors = [], []
        pattern = re.compile(re.escape(self.open) + r"(.*?)" + re.escape(self.close), re.DOTALL)
        for m in pattern.finditer(text):
            obj, err = _loads(m.group(1).strip())
            args, err = (None, err) if err else _json_args(obj, "arguments")
            if err:
                errors.append(err)
            else:
                calls.append(ToolCall(obj["name"], args))
        rest = pattern.sub("", text)
        if self.open in rest:
            errors.append(f"a {self.open} block is not closed by {self.close}")
        return ParsedTurn(rest.replace(self.open, "").strip(), tuple(calls), "; ".join(errors))


@dataclasses.dataclass(frozen=True)
class Llama3Parser:
    name: str = "llama3"
    stop_strings: tuple[str, ...] = ()  # a call ends with the end-of-turn token
    tags: tuple[str, ...] = ()

    def format_calls(self, calls: list[ToolCall]) -> str:
        if len(calls) != 1:
            raise ValueError("Llama 3 JSON tool calling writes one call per turn")
        return json.dumps({"name": calls[0].name, "parameters": calls[0].arguments}, ensure_ascii=False)

    def parse(self, text: str) -> ParsedTurn:
        body = text.strip().removeprefix("<|python_tag|>").strip()
        if not body.startswith("{"):  # plain text: the final answer, no call
            return ParsedTurn(text.strip(), ())
        obj, err = _loads(body)
        args, err = (None, err) if err else _json_args(obj, "parameters")
        if err:
            return ParsedTurn("", (), err)
        return ParsedTurn("", (ToolCall(obj["name"], args),))


@dataclasses.dataclass(frozen=True)
class MistralParser:
    name: str = "mistral"
    marker: str = "[TOOL_CALLS]"
    stop_strings: tuple[str, ...] = ()
    tags: tuple[str, ...] = ("[TOOL_CALLS]",)

    def format_calls(self, calls: list[ToolCall]) -> str:
        return self.marker + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)

    def parse(self, text: str) -> ParsedTurn:
        if self.marker not in text:
            return ParsedTurn(text.strip(), ())
        before, _, body = text.partition(self.marker)
        obj, err = _loads(body.strip())
        if not err and not isinstance(obj, list):
            err = f"{self.marker} must be followed by a JSON list of calls"
        calls = []
        for item in obj if not err else []:
            args, err = _json_args(item, "arguments")
            if err:
                break
            calls.append(ToolCall(item["name"], args))
        if err:
            return ParsedTurn(before.strip(), (), err)
        if not calls:
            return ParsedTurn(before.strip(), (), f"{self.marker} holds no call")
        return ParsedTurn(before.strip(), tuple(calls))


PARSERS = {"hermes": HermesParser(), "llama3": Llama3Parser(), "mistral": MistralParser()}


def get_parser(name: str):
    if name not in PARSERS:
        raise ValueError(f"unknown tool parser {name!r}; use one of {', '.join(PARSERS)}")
    return PARSERS[name]

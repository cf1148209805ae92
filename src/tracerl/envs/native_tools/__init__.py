"""Native tool calls: tools as callables or JSON schemas, rendered through the model's own chat template
(`apply_chat_template(messages, tools=...)`), parsed by the model family's parser (docs/tools.md).

`NativeTools` is what an environment in native mode carries (`env.native_tools`) and a demonstration
built from it (`Demo.native`): the parser chosen by `env.tool_parser` and the tool set. The agent loop
renders the prompt with its schemas and each tool result in the template's `tool` role
(rollout/tool_turns.py); the policy's sampled ids are never re-tokenised.
"""

from __future__ import annotations

import dataclasses

from tracerl.envs.native_tools.parsers import PARSERS, ParsedTurn, ToolCall, get_parser
from tracerl.envs.native_tools.schema import ToolSet, tool_schema

__all__ = ["NATIVE_ENVS", "NativeTools", "PARSERS", "ParsedTurn", "ToolCall", "ToolSet", "get_parser", "sample_call",
           "native_spec", "register_native", "tool_schema"]


@dataclasses.dataclass(frozen=True)
class NativeTools:
    parser: object  # a parser of parsers.py
    tools: ToolSet

    @property
    def schemas(self) -> list[dict]:
        return self.tools.schemas

    def tools_text(self) -> str:
        """The schemas as text (part of the tiny tokenizer's corpus: the template shows them to the model)."""
        return "\n".join([*self.schema_lines(), "system user assistant tool # Tools <tools> </tools> Call a tool as"])

    def schema_lines(self) -> list[str]:
        """Each schema as the templates' `tojson` writes it (one line each)."""
        import json

        return [json.dumps(s, ensure_ascii=False) for s in self.schemas]

    def tiny_tokenizer_tags(self) -> tuple[str, ...]:
        """What the built-in tiny tokenizer keeps whole: the family's call tags, each schema line and the Hermes
        template's call instruction (else a 512-token BPE spends ~400 tokens of every prompt spelling them)."""
        from tracerl.models.chat_templates import HERMES_CALL_LINE

        return (*self.parser.tags, *self.schema_lines(), *((HERMES_CALL_LINE,) if self.parser.name == "hermes" else ()))


NATIVE_ENVS: dict[str, object] = {}  # env name -> (spec, parser name) -> the spec of its native mode


def register_native(env_name: str, make_spec) -> None:
    """Declare that `env_name` has a native tool mode: `make_spec(spec, parser_name)` returns its spec."""
    NATIVE_ENVS[env_name] = make_spec


def native_spec(spec, tool_format: str, tool_parser: str):
    """`spec` as `env.tool_format` / `env.tool_parser` ask: unchanged for the grammar; else its native mode."""
    if tool_format != "native":
        return spec
    from tracerl.errors import UserError

    make = NATIVE_ENVS.get(spec.name)
    if make is None:
        raise UserError(f"env {spec.name!r} has no native tool mode (env.tool_format: native); environments with one: "
                        f"{', '.join(sorted(NATIVE_ENVS)) or 'none'}; use env.tool_format: grammar")
    return make(spec, tool_parser)


def _sample_arguments(schema: dict) -> dict:
    params = schema["function"].get("parameters", {})
    samples = {"string": "6*7", "integer": 42, "number": 4.2, "boolean": True, "array": [6, 7], "object": {}}
    props = params.get("properties", {})
    return {k: samples.get(v.get("type") if isinstance(v, dict) else None, "6*7") for k, v in props.items()}


def sample_call(native: NativeTools) -> ToolCall:
    """A call of the first tool with typical arguments for its schema: the probe of the template
    conformance check (rollout/tool_turns.py) and of the reward stop-string check (envs/dataset/tools.py)."""
    schema = native.schemas[0]
    return ToolCall(schema["function"]["name"], _sample_arguments(schema))

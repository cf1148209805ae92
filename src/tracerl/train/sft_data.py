"""SFT data from a file of conversations (`sft.data: PATH`), e.g. distilled from a stronger model.

The file is JSONL, one conversation per line, in the OpenAI chat shape:

    {"messages": [{"role": "system", "content": "..."},      # optional, first
                  {"role": "user", "content": "What is 3 * 4?"},
                  {"role": "assistant", "content": "<code>print(3 * 4)</code>"},
                  {"role": "tool", "content": "<output>12</output>"},
                  {"role": "assistant", "content": "<answer>12</answer>"}]}

Tool calls are written in the environment's own grammar inside the assistant's `content`
(`<code>...</code>` for math_tool), exactly as the policy writes them in RL. In native tool mode
(`env.tool_format: native`, docs/tools.md) an assistant message may instead carry OpenAI
`tool_calls` (`{"type": "function", "function": {"name", "arguments"}}`, arguments an object or a JSON
string of one), and a row may list its `tools` (OpenAI schemas; default: the environment's): the
prompt is rendered with the schemas through the chat template, each call is written as the
`env.tool_parser` family writes it (which the run-start conformance check holds equal to the
template's own rendering), and each result goes in the template's `tool` role. Without native mode
`tool_calls` is refused, because the env would never see a call written that way.
Messages up to the first assistant message are the prompt; after it, assistant and tool
messages alternate, ending on an assistant message. Each conversation becomes a `Demo`, so it
is tokenized like an expert demonstration: the prompt through the chat template (PROMPT /
TEMPLATE), each assistant message as ACTION tokens (the only ones with loss), each tool message
through the template's tool role when it has one (OBSERVATION). A bad file or line is one
sentence naming the line and the fix (`UserError`, exit 2), before anything is trained.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracerl.contract.task import Task
from tracerl.errors import UserError
from tracerl.train.demos import Demo

MAX_BYTES = 1 << 30
_PROMPT_ROLES = ("system", "user")


def _fail(path: Path, line: int, why: str, fix: str) -> UserError:
    return UserError(f"{path}:{line}: {why}; {fix}")


def _action(path: Path, n: int, j: int, m: dict, native) -> str:
    """An assistant message's action text: its content, then its `tool_calls` as the parser writes them."""
    from tracerl.envs.native_tools import ToolCall

    calls = []
    for call in m.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else None
        args = fn.get("arguments", {}) if isinstance(fn, dict) else None
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(args, dict):
            raise _fail(path, n, f"message {j} has a tool call without a string name and an object of arguments",
                        'write {"type": "function", "function": {"name": ..., "arguments": {...}}}')
        calls.append(ToolCall(fn["name"], args))
    return (m.get("content") or "") + (native.parser.format_calls(calls) if calls else "")


def _conversation(path: Path, n: int, row, native=None) -> Demo:
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
        raise _fail(path, n, "a line must be a JSON object with a `messages` list",
                    'write {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}]}')
    msgs = row["messages"]
    for j, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise _fail(path, n, f"message {j} has no role system, user, assistant or tool",
                        'give every message a "role" and a "content"')
        if m.get("tool_calls") and (native is None or m["role"] != "assistant"):
            raise _fail(path, n, f"message {j} uses the OpenAI `tool_calls` field",
                        "write the tool call in the environment's grammar inside `content` (e.g. <code>...</code>), "
                        "or train with env.tool_format: native")
        if m.get("tool_calls") and m.get("content") in (None, ""):
            continue
        if not isinstance(m.get("content"), str) or not m["content"]:
            raise _fail(path, n, f"message {j} ({m['role']}) has no text `content`", "give it a non-empty string")
    first = next((j for j, m in enumerate(msgs) if m["role"] == "assistant"), None)
    if first is None:
        raise _fail(path, n, "the conversation has no assistant message, so nothing would be trained",
                    "add the assistant's answer or drop the line")
    prompt = msgs[:first]
    if not any(m["role"] == "user" for m in prompt) or any(m["role"] not in _PROMPT_ROLES for m in prompt):
        raise _fail(path, n, "the messages before the first assistant message must be system/user with at least one user",
                    "start the conversation with the user's request")
    if any(m["role"] == "system" for m in prompt[1:]):
        raise _fail(path, n, "a system message may only come first", "move it to the start")
    rest = msgs[first:]
    for j, m in enumerate(rest):
        want = "assistant" if j % 2 == 0 else "tool"
        if m["role"] != want:
            raise _fail(path, n, f"message {first + j} is {m['role']!r} where {want!r} was expected (after the prompt, "
                        "assistant and tool messages alternate)", "merge consecutive messages of one role")
    if rest[-1]["role"] != "assistant":
        raise _fail(path, n, "the conversation ends on a tool message", "end it with the assistant's answer")
    turns = [(_action(path, n, first + j, rest[j], native) if native else rest[j]["content"],
              rest[j + 1]["content"] if j + 1 < len(rest) else None) for j in range(0, len(rest), 2)]
    messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
    task = Task(id=str(row.get("id", f"line-{n}")), prompt=messages[-1]["content"], source=f"sft-data:{path.name}",
                split="train")
    if native is not None and row.get("tools") is not None:  # the row's own tool schemas
        from tracerl.envs.native_tools import NativeTools, ToolSet

        try:
            native = NativeTools(native.parser, ToolSet(list(row["tools"])))
        except (TypeError, ValueError) as err:
            raise _fail(path, n, f"its `tools` are not OpenAI tool schemas ({err})", "fix or drop `tools`") from None
    reward = float(row.get("reward", 0.0)) if isinstance(row.get("reward"), (int, float)) else 0.0
    return Demo(task, messages, turns, reward, native)


def load_conversations(path: str | Path, *, limit: int | None = None, native=None) -> list[Demo]:
    """Every conversation of a JSONL file (the first `limit`), validated; one sentence on the first bad line.
    `native`: the environment's `NativeTools` in native tool mode (`native_tools_of`), else None."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"sft.data {str(path)!r} is not a file; point it at a JSONL file of conversations")
    if path.stat().st_size > MAX_BYTES:
        raise UserError(f"sft.data {path} is larger than 1 GiB; split it or sample from it")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise _fail(path, line, "the file is not UTF-8 text", "save it as UTF-8 JSONL") from None
    demos = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            why = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
            raise _fail(path, n, f"not valid JSON ({why})", "write one JSON object per line") from None
        demos.append(_conversation(path, n, row, native))
        if limit is not None and len(demos) >= limit:
            break
    if not demos:
        raise UserError(f"sft.data {path} holds no conversation; write one JSON object with `messages` per line")
    return demos


def native_tools_of(recipe):
    """The `NativeTools` of the recipe's environment in native tool mode (None with the grammar)."""
    if recipe.env.tool_format != "native":
        return None
    from tracerl.envs.base import get_env
    from tracerl.envs.native_tools import native_spec

    return native_spec(get_env(recipe.env.name), "native", recipe.env.tool_parser).make().native_tools


def write_conversations(path: str | Path, demos: list[Demo]) -> int:
    """Write demonstrations as a conversations file (how the shipped example was made)."""
    lines = []
    for d in demos:
        msgs = list(d.messages)
        for action, obs in d.turns:
            msgs.append({"role": "assistant", "content": action})
            if obs:
                msgs.append({"role": "tool", "content": obs})
        lines.append(json.dumps({"id": d.task.id, "messages": msgs}, ensure_ascii=False))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)

"""SFT data from a file of conversations (`sft.data: PATH`), e.g. distilled from a stronger model.

The file is JSONL, one conversation per line, in the OpenAI chat shape:

    {"messages": [{"role": "system", "content": "..."},      # optional, first
                  {"role": "user", "content": "What is 3 * 4?"},
                  {"role": "assistant", "content": "<code>print(3 * 4)</code>"},
                  {"role": "tool", "content": "<output>12</output>"},
                  {"role": "assistant", "content": "<answer>12</answer>"}]}

Tool calls are written in the environment's own grammar inside the assistant's `content`
(`<code>...</code>` for math_tool), exactly as the policy writes them in RL; the OpenAI
`tool_calls` field is refused, because the env would never see a call written that way.
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


def _conversation(path: Path, n: int, row) -> Demo:
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
        raise _fail(path, n, "a line must be a JSON object with a `messages` list",
                    'write {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}]}')
    msgs = row["messages"]
    for j, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise _fail(path, n, f"message {j} has no role system, user, assistant or tool",
                        'give every message a "role" and a "content"')
        if m.get("tool_calls"):
            raise _fail(path, n, f"message {j} uses the OpenAI `tool_calls` field",
                        "write the tool call in the environment's grammar inside `content` (e.g. <code>...</code>)")
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
    turns = [(rest[j]["content"], rest[j + 1]["content"] if j + 1 < len(rest) else None) for j in range(0, len(rest), 2)]
    messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
    task = Task(id=str(row.get("id", f"line-{n}")), prompt=messages[-1]["content"], source=f"sft-data:{path.name}",
                split="train")
    return Demo(task, messages, turns, float(row.get("reward", 0.0)) if isinstance(row.get("reward"), (int, float)) else 0.0)


def load_conversations(path: str | Path, *, limit: int | None = None) -> list[Demo]:
    """Every conversation of a JSONL file (the first `limit`), validated; one sentence on the first bad line."""
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
        demos.append(_conversation(path, n, row))
        if limit is not None and len(demos) >= limit:
            break
    if not demos:
        raise UserError(f"sft.data {path} holds no conversation; write one JSON object with `messages` per line")
    return demos


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

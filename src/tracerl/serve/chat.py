"""Chat messages to prompt token ids with roles, and a completion back to an OpenAI assistant message.

Token in, token out. When a conversation continues a call this episode was served (the same
messages, then the assistant message the gateway returned, then tool results), the prompt is that
call's prompt ids + its sampled ids + each tool result rendered on its own (`rollout/render.py:
render_observation`, the chat template's tool role when it has one, else inline
`<tool_response>…</tool_response>`): exactly what the in-process agent loop would feed, and the
sampled ids are never re-tokenized. Any other conversation is rendered whole by the chat template
(with `tools`, when the template renders them; otherwise the tools are listed in the system message,
`envs/json_tools.py`), and an assistant turn the gateway served is rendered as the text it sampled.
"""

from __future__ import annotations

import json

from tracerl.contract.roles import TokenRole
from tracerl.envs.json_tools import format_tool_call, format_tool_result, parse_tool_calls, tools_system_prompt
from tracerl.rollout.render import render_observation, tool_role_wrap
from tracerl.serve.errors import bad_request
from tracerl.serve.records import CallRecord
from tracerl.serve.schemas import ChatMessage


def canonical(m: ChatMessage) -> dict:
    """What identifies a message when deciding whether a conversation continues an earlier call."""
    role = "system" if m.role == "developer" else m.role
    calls = [[c.id, c.function.name, c.function.arguments] for c in (m.tool_calls or [])]
    return {"role": role, "content": m.text(), "tool_calls": calls, "tool_call_id": m.tool_call_id}


def template_renders_tools(tokenizer) -> bool:
    template = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(template, str) and "tools" in template


def _render_template(tokenizer, msgs: list[dict], tools: list[dict] | None) -> tuple[list[int], list[TokenRole]]:
    """The chat template with the generation prompt; message content is PROMPT, the rest TEMPLATE."""
    kw = {"tools": tools} if tools else {}
    try:
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kw)
    except Exception as err:  # the template rejected the conversation (e.g. roles out of order)
        raise bad_request(f"the model's chat template cannot render these messages ({type(err).__name__}: "
                          f"{str(err)[:200]}); check the roles and their order", param="messages") from None
    spans, cursor = [], 0
    for m in msgs:
        content = m.get("content") or ""
        start = text.find(content, cursor) if content else -1
        if start >= 0:
            spans.append((start, start + len(content)))
            cursor = start + len(content)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    roles = [TokenRole.PROMPT if any(s <= a and b <= e and b > a for s, e in spans) else TokenRole.TEMPLATE
             for a, b in enc["offset_mapping"]]
    return list(enc["input_ids"]), roles


def render_full(tokenizer, messages: list[ChatMessage], tools: list[dict] | None,
                sampled_text: dict[str, str]) -> tuple[list[int], list[TokenRole]]:
    """The whole conversation through the chat template (a conversation that continues no served call)."""
    native = template_renders_tools(tokenizer)
    inline_tools = tool_role_wrap(tokenizer) is None and not native
    msgs: list[dict] = []
    for m in messages:
        c = canonical(m)
        if c["role"] == "assistant" and c["tool_calls"]:
            raw = sampled_text.get(c["tool_calls"][0][0])
            if raw is None:
                raw = c["content"] + "".join(format_tool_call(n, _args(a)) for _, n, a in c["tool_calls"])
            msgs.append({"role": "assistant", "content": raw})
        else:
            msgs.append({"role": c["role"], "content": c["content"]})
    if tools and not native:
        if msgs[0]["role"] == "system":
            msgs[0] = {"role": "system", "content": tools_system_prompt(msgs[0]["content"], tools)}
        else:
            msgs.insert(0, {"role": "system", "content": tools_system_prompt("", tools)})
    if not inline_tools:
        return _render_template(tokenizer, msgs, tools if native else None)
    # no tool role: the turns after the last user message are the policy's text and inline tool results
    last = max((i for i, m in enumerate(msgs) if m["role"] not in ("assistant", "tool")), default=-1)
    ids, roles = _render_template(tokenizer, msgs[:last + 1], None)
    for m in msgs[last + 1:]:
        if m["role"] == "tool":
            o_ids, o_roles = render_observation(tokenizer, format_tool_result(m["content"]))
        else:  # an earlier action, re-tokenized: context now, never trained on as an action
            o_ids = list(tokenizer(m["content"], add_special_tokens=False)["input_ids"])
            o_roles = [TokenRole.PROMPT] * len(o_ids)
        ids, roles = ids + o_ids, roles + o_roles
    return ids, roles


def _args(arguments: str) -> dict:
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        raise bad_request("a tool call's 'arguments' is not JSON; send back the arguments string the gateway returned",
                          param="messages") from None
    return value if isinstance(value, dict) else {"value": value}


def extend(tokenizer, prev: CallRecord, canon: list[dict], messages: list[ChatMessage]):
    """(ids, roles, tool names) when `messages` continue `prev` with its reply and tool results; else None."""
    n = len(prev.messages or [])
    if prev.messages is None or len(canon) < n + 2 or canon[:n] != prev.messages or canon[n] != prev.reply:
        return None
    rest = messages[n + 1:]
    if any(m.role != "tool" for m in rest):
        return None
    inline = tool_role_wrap(tokenizer) is None
    ids = prev.prompt_ids + prev.completion_ids
    roles = list(prev.prompt_roles) + [TokenRole.PROMPT] * len(prev.completion_ids)  # context when split off
    names = {c[0]: c[1] for c in prev.reply["tool_calls"]}
    tools_used = []
    for m in rest:
        o_ids, o_roles = render_observation(tokenizer, format_tool_result(m.text()) if inline else m.text())
        ids, roles = ids + o_ids, roles + o_roles
        tools_used.append(names.get(m.tool_call_id, m.name or "tool"))
    return ids, roles, tools_used


def reply_message(text: str, span_id: str, with_tools: bool) -> tuple[dict, bool]:
    """(OpenAI assistant message, whether it is a tool call) from the sampled text."""
    if with_tools:
        turn = parse_tool_calls(text)
        if turn.calls and not turn.error:
            calls = [{"id": f"call_{span_id}_{i}", "type": "function",
                      "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                     for i, c in enumerate(turn.calls)]
            return {"role": "assistant", "content": turn.content or None, "tool_calls": calls}, True
    return {"role": "assistant", "content": text}, False


def reply_canonical(message: dict) -> dict:
    calls = [[c["id"], c["function"]["name"], c["function"]["arguments"]] for c in message.get("tool_calls") or []]
    return {"role": "assistant", "content": message.get("content") or "", "tool_calls": calls, "tool_call_id": None}

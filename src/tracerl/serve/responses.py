"""`POST /v1/responses`: the OpenAI Responses API (the Agents SDK's default model) over the chat path.

A request becomes a chat request: `instructions` the system message, `input` (a string, or items:
messages, `function_call`, `function_call_output`) the conversation, function `tools` the chat
tools, `text.format` the `response_format`, `max_output_tokens` the budget, `metadata.episode_id` /
`X-Episode-Id` the episode. So a Responses call samples, renders, extends its episode's previous
call token for token and is recorded as a span exactly as a chat call is; its output items are the
chat reply (a `message` with `output_text`, and one `function_call` per tool call). `stream: true`
sends the Responses events (`response.created`, `response.output_item.added`,
`response.output_text.delta`, `response.function_call_arguments.delta`, ..., `response.completed`).

Refused with a 400 naming the field, since this gateway cannot do them: `previous_response_id` and
`conversation` (nothing is stored; send the whole input), `store: true`, `reasoning`,
`truncation: "auto"`, a `prompt` template, `background`, non-function tools, non-text input parts,
`include` entries other than `message.output_text.logprobs`, `parallel_tool_calls: false` unless
`tool_choice` forces one call. A function tool's `strict: true` is kept by returning a call only
when its arguments satisfy the tool's schema (`jsonschema`); otherwise the sample comes back as text.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tracerl.serve.errors import bad_request, validation_message
from tracerl.serve.schemas import ChatRequest
from tracerl.serve.streaming import sse

_REFUSED = {"previous_response_id": "nothing is stored between calls; send the whole conversation as 'input'",
            "conversation": "nothing is stored between calls; send the whole conversation as 'input'",
            "reasoning": "this model has no reasoning settings; omit 'reasoning'",
            "prompt": "prompt templates are not stored here; send 'instructions' and 'input'",
            "background": "calls run in the foreground; omit 'background'",
            "context_management": "the context is not managed here; omit 'context_management'"}


class ResponsesRequest(BaseModel):
    # strict: no "5" or "yes" for a number or a flag; unknown fields are kept to be refused by name in to_chat
    model_config = ConfigDict(extra="allow", strict=True)
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_output_tokens: int | None = Field(None, ge=1)
    text: dict[str, Any] | None = None
    include: list[str] | None = None
    store: bool | None = None
    truncation: str | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = Field(None, max_length=256)  # recorded on the span, as on the chat route
    previous_response_id: str | None = None
    conversation: Any = None
    reasoning: Any = None
    prompt: Any = None
    background: bool | None = None
    context_management: Any = None


def _text(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list | None):  # a number, an object: not text (400, not a TypeError's 500)
        raise bad_request(f"{where}: content must be a string or a list of text parts", param="input")
    parts = []
    for p in content or []:
        if not isinstance(p, dict) or p.get("type") not in ("input_text", "output_text", "text"):
            raise bad_request(f"{where}: only text content parts are served (input_text / output_text)", param="input")
        parts.append(p.get("text") or "")
    return "".join(parts)


def _messages(req: ResponsesRequest) -> list[dict]:
    msgs = [{"role": "system", "content": req.instructions}] if req.instructions else []
    if isinstance(req.input, str):
        return msgs + [{"role": "user", "content": req.input}]
    for k, item in enumerate(req.input):
        kind = item.get("type", "message")
        if kind == "message":
            msgs.append({"role": item.get("role"), "content": _text(item.get("content"), f"input[{k}]")})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}
            last = msgs[-1] if msgs else None
            if last and last["role"] == "assistant" and not last.get("_closed"):
                last.setdefault("tool_calls", []).append(call)
            else:
                msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if msgs and msgs[-1]["role"] == "assistant":
                msgs[-1]["_closed"] = True
            out = item.get("output")
            msgs.append({"role": "tool", "tool_call_id": item.get("call_id"),
                         "content": out if isinstance(out, str) else _text(out, f"input[{k}].output")})
        else:
            raise bad_request(f"input[{k}] has type {kind!r}; this gateway takes message, function_call and "
                              "function_call_output items", param="input")
    for m in msgs:
        m.pop("_closed", None)
        if m["role"] == "assistant" and m.get("tool_calls") and not m.get("content"):
            m["content"] = None
    return msgs


def to_chat(req: ResponsesRequest) -> tuple[ChatRequest, dict[str, dict]]:
    """The chat request this Responses request is, and the strict tools' schemas by name."""
    for name in req.model_extra or {}:
        raise bad_request(f"unrecognized request argument {name[:64]!r}; this gateway takes the Responses fields listed "
                          "in docs/gateway.md", param=name[:64])
    for name, why in _REFUSED.items():
        if getattr(req, name) not in (None, False):
            raise bad_request(f"'{name}' is not supported: {why}", param=name)
    if req.store:
        raise bad_request("'store' is not supported: responses are not kept; send store=false or omit it", param="store")
    if req.truncation not in (None, "disabled"):
        raise bad_request("'truncation' must be 'disabled': an input over the context is refused, never cut",
                          param="truncation")
    extra = sorted(set(req.include or []) - {"message.output_text.logprobs"})
    if extra:
        raise bad_request(f"'include' {extra} is not served; only 'message.output_text.logprobs'", param="include")
    tools, strict = [], {}
    for t in req.tools or []:
        if t.get("type") != "function" or not isinstance(t.get("name"), str):
            raise bad_request(f"tool {t.get('type')!r} is not served; only function tools "
                              "({'type': 'function', 'name': ..., 'parameters': {...}})", param="tools")
        tools.append({"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters") if k in t}})
        if t.get("strict"):
            strict[t["name"]] = t.get("parameters") or {}
    choice = req.tool_choice
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        choice = {"type": "function", "function": {"name": choice["name"]}}
    forced = choice == "required" or isinstance(choice, dict)
    if req.parallel_tool_calls is False and not forced:
        raise bad_request("'parallel_tool_calls': false is kept only with a tool_choice that forces one call "
                          "('required' or a named function); the model may write several calls otherwise",
                          param="parallel_tool_calls")
    fmt = (req.text or {}).get("format")
    logprobs = "message.output_text.logprobs" in (req.include or []) or bool(req.top_logprobs)
    body = {"model": req.model, "messages": _messages(req), "tools": tools or None, "tool_choice": choice,
            "temperature": req.temperature, "top_p": req.top_p, "max_tokens": req.max_output_tokens,
            "logprobs": logprobs, "top_logprobs": req.top_logprobs, "metadata": req.metadata,
            "response_format": fmt, "user": req.user}
    try:  # through JSON, as the chat route validates its body: the same checks, the same messages
        return ChatRequest.model_validate_json(json.dumps(body)), strict
    except ValidationError as err:
        message, param = validation_message(list(err.errors()))
        raise bad_request(message, param=param) from None


def _strict_ok(message: dict, strict: dict[str, dict]) -> bool:
    import jsonschema

    for tc in message.get("tool_calls") or []:
        schema = strict.get(tc["function"]["name"])
        if schema is not None:
            try:
                jsonschema.validate(json.loads(tc["function"]["arguments"]), schema)
            except (jsonschema.ValidationError, jsonschema.SchemaError, json.JSONDecodeError):
                return False
    return True


def to_response(req: ResponsesRequest, chat: dict, strict: dict[str, dict], raw_text: str) -> dict:
    choice = chat["choices"][0]
    message, span = choice["message"], chat["tracerl"]["span_id"]
    if message.get("tool_calls") and not _strict_ok(message, strict):
        message = {"role": "assistant", "content": raw_text}  # a strict schema is not met: no call is returned
    output = []
    logprobs = [{"token": e["token"], "logprob": e["logprob"], "bytes": e["bytes"],
                 "top_logprobs": e["top_logprobs"]} for e in ((choice.get("logprobs") or {}).get("content") or [])]
    if message.get("content") or not message.get("tool_calls"):
        output.append({"type": "message", "id": f"msg_{span}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": message.get("content") or "", "annotations": [],
                                    "logprobs": logprobs}]})
    for tc in message.get("tool_calls") or []:
        output.append({"type": "function_call", "id": f"fc_{tc['id']}", "call_id": tc["id"], "status": "completed",
                       "name": tc["function"]["name"], "arguments": tc["function"]["arguments"]})
    cut = choice["finish_reason"] == "length"
    usage = chat["usage"]
    return {"id": f"resp_{span}", "object": "response", "created_at": float(chat["created"]),
            "status": "incomplete" if cut else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": None,
            "model": chat["model"], "output": output, "instructions": req.instructions, "metadata": req.metadata or {},
            "parallel_tool_calls": req.parallel_tool_calls is not False, "temperature": req.temperature,
            "top_p": req.top_p, "tool_choice": req.tool_choice or "auto", "tools": req.tools or [],
            "max_output_tokens": req.max_output_tokens, "text": req.text or {"format": {"type": "text"}},
            "truncation": "disabled", "store": False,
            "usage": {"input_tokens": usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": usage["total_tokens"]},
            "prompt_token_ids": chat["prompt_token_ids"], "token_ids": choice["token_ids"], "tracerl": chat["tracerl"]}


def response_events(resp: dict):
    """The Responses stream of a finished response, in the order the openai client and the Agents SDK read it."""
    seq = iter(range(1 << 30))

    def ev(kind, **kw):
        return f"event: {kind}\n" + sse({"type": kind, "sequence_number": next(seq), **kw})

    pending = {**resp, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None,
               "created_at": resp["created_at"] or time.time()}
    yield ev("response.created", response=pending)
    yield ev("response.in_progress", response=pending)
    for i, item in enumerate(resp["output"]):
        if item["type"] == "message":
            part = item["content"][0]
            yield ev("response.output_item.added", output_index=i,
                     item={**item, "status": "in_progress", "content": []})
            yield ev("response.content_part.added", item_id=item["id"], output_index=i, content_index=0,
                     part={**part, "text": "", "logprobs": []})
            text, lps = part["text"], part["logprobs"]
            step = max(1, -(-len(text) // max(1, len(lps)))) if lps else 8
            for k in range(0, len(text), step):
                j = k // step
                yield ev("response.output_text.delta", item_id=item["id"], output_index=i, content_index=0,
                         delta=text[k:k + step], logprobs=lps[j:j + 1] if lps else [])
            yield ev("response.output_text.done", item_id=item["id"], output_index=i, content_index=0, text=text,
                     logprobs=lps)
            yield ev("response.content_part.done", item_id=item["id"], output_index=i, content_index=0, part=part)
        else:
            yield ev("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "arguments": ""})
            args = item["arguments"]
            for k in range(0, len(args), 8):
                yield ev("response.function_call_arguments.delta", item_id=item["id"], output_index=i,
                         delta=args[k:k + 8])
            yield ev("response.function_call_arguments.done", item_id=item["id"], output_index=i, arguments=args,
                     name=item["name"])
        yield ev("response.output_item.done", output_index=i, item=item)
    yield ev("response.incomplete" if resp["status"] == "incomplete" else "response.completed", response=resp)

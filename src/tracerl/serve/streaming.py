"""`stream: true` for chat and completions: server-sent events in OpenAI's chunk format, then `data: [DONE]`.

The samples are drawn first (the engine batches whole calls) and recorded as spans exactly as
without streaming; the chunks then carry them token by token: per token a content delta (and its
`logprobs` entry when asked), a tool call as `delta.tool_calls` (the id and name first, then the
arguments in pieces), a last chunk per choice with its `finish_reason` and the extensions
(`token_ids`, `span_id`), and with `stream_options.include_usage` a final chunk with `usage` and no
choices. The first chunk carries `prompt_token_ids` and `tracerl`. So a stream gives no earlier first
token than a plain call; it gives a client that only speaks streaming the same samples.
"""

from __future__ import annotations

import json
from collections.abc import Iterator


def sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    """The text each token adds (incremental decoding, special tokens skipped), so pieces join to the text."""
    out, prev = [], ""
    for k in range(1, len(ids) + 1):
        cur = tokenizer.decode(ids[:k], skip_special_tokens=True)
        out.append(cur[len(prev):] if cur.startswith(prev) else cur)
        prev = cur if cur.startswith(prev) else prev + out[-1]
    return out


def chat_chunks(resp: dict, tokenizer, include_usage: bool) -> Iterator[str]:
    base = {"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"], "model": resp["model"]}
    usage = {"usage": None} if include_usage else {}

    def chunk(i, delta, finish=None, logprobs=None, **ext):
        return sse({**base, "choices": [{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish,
                                         **ext}], **usage})

    first = True
    for ch in resp["choices"]:
        i, msg = ch["index"], ch["message"]
        head = {"prompt_token_ids": resp["prompt_token_ids"], "tracerl": resp["tracerl"]} if first else {}
        first = False
        yield sse({**base, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                        "finish_reason": None}], **usage, **head})
        entries = (ch.get("logprobs") or {}).get("content")
        if msg.get("tool_calls"):
            if msg.get("content"):
                yield chunk(i, {"content": msg["content"]})
            if entries:
                yield chunk(i, {}, logprobs={"content": entries})
            for j, tc in enumerate(msg["tool_calls"]):
                fn = tc["function"]
                yield chunk(i, {"tool_calls": [{"index": j, "id": tc["id"], "type": "function",
                                                "function": {"name": fn["name"], "arguments": ""}}]})
                args = fn["arguments"]
                for k in range(0, len(args), 8):
                    yield chunk(i, {"tool_calls": [{"index": j, "function": {"arguments": args[k:k + 8]}}]})
        else:
            for k, piece in enumerate(_pieces(tokenizer, ch["token_ids"])):
                lp = {"content": [entries[k]]} if entries else None
                if piece or lp:
                    yield chunk(i, {"content": piece}, logprobs=lp)
        yield chunk(i, {}, ch["finish_reason"], token_ids=ch["token_ids"], span_id=ch["span_id"])
    if include_usage:
        yield sse({**base, "choices": [], "usage": resp["usage"]})
    yield "data: [DONE]\n\n"


def completion_chunks(resp: dict, tokenizer, include_usage: bool) -> Iterator[str]:
    base = {"id": resp["id"], "object": "text_completion", "created": resp["created"], "model": resp["model"]}
    usage = {"usage": None} if include_usage else {}
    first = True
    for ch in resp["choices"]:
        lp = ch.get("logprobs")
        for k, piece in enumerate(_pieces(tokenizer, ch["token_ids"])):
            part = {"tokens": lp["tokens"][k:k + 1], "token_logprobs": lp["token_logprobs"][k:k + 1],
                    "text_offset": lp["text_offset"][k:k + 1],
                    "top_logprobs": lp["top_logprobs"][k:k + 1] if lp["top_logprobs"] is not None else None} \
                if lp else None
            head = {"prompt_token_ids": resp["prompt_token_ids"], "tracerl": resp["tracerl"]} if first else {}
            first = False
            yield sse({**base, "choices": [{"index": ch["index"], "text": piece, "logprobs": part, "finish_reason": None}],
                       **usage, **head})
        yield sse({**base, "choices": [{"index": ch["index"], "text": "", "logprobs": None,
                                        "finish_reason": ch["finish_reason"], "token_ids": ch["token_ids"],
                                        "span_id": ch["span_id"]}], **usage})
    if include_usage:
        yield sse({**base, "choices": [], "usage": resp["usage"]})
    yield "data: [DONE]\n\n"

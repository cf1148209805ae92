"""Native tool calls at the token level: the prompt with the tool schemas, each tool result in the chat
template's `tool` role, and the run-start conformance check (docs/tools.md).

Token honesty: the policy's sampled ids are appended as ACTION exactly as sampled and never decoded
and re-encoded into the sequence. After a tool call, the text the template puts between the end of
the assistant's call and the tool result (`before`), the result (OBSERVATION), and the text that closes
the tool turn and opens the next assistant turn (`after`) are each tokenized on their own and
appended; `before` and `after` are TEMPLATE. When the policy ended its turn with the end-of-sequence
token and `before` starts with that token's text (Llama 3, Mistral, SmolLM2's `<|im_end|>`), that text
is not appended twice.

`check_conformance` proves, at run start, that this incremental path yields the same ids as rendering
the whole conversation through the template, and that the parser recovers the template's tool call;
a template that drops `tool_calls` or re-renders them (other JSON spacing, trimmed whitespace) is
refused in one sentence before anything trains.
"""

from __future__ import annotations

from tracerl.contract.roles import TokenRole
from tracerl.envs.native_tools import NativeTools, ToolCall, sample_call
from tracerl.rollout.render import encode_observation, render_prompt

_PROBE_OBS = "\x00o\x00"
_SYSTEM, _USER, _RESULT = "You are a helpful assistant.", "What is 6 times 7?", "the result is 17"


def _assistant(call: ToolCall) -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": call.name, "arguments": call.arguments}}]}


def _render(tok, messages, native: NativeTools, gen: bool) -> str:
    return tok.apply_chat_template(messages, tools=native.schemas, tokenize=False, add_generation_prompt=gen)


def _ends_with_eos(parser) -> bool:
    """Whether a tool-call turn of this family ends with the end-of-sequence token (no stop string)."""
    return not parser.stop_strings


def action_ids(tok, native: NativeTools, text: str) -> list[int]:
    """The ids a policy samples for action `text`: the text, then end-of-sequence where the family ends a
    call turn with it (a demonstration's actions; RL actions are the sampled ids themselves)."""
    ids = list(tok(text, add_special_tokens=False)["input_ids"])
    ends = not any(text.endswith(s) for s in native.parser.stop_strings)
    return ids + [tok.eos_token_id] if ends and tok.eos_token_id is not None else ids


def tool_wrap(tok, native: NativeTools) -> tuple[str, str] | None:
    """(before, after) the tool result as the template renders it after an assistant tool call, or None
    when the template does not render the call as the parser writes it. Cached on the tokenizer."""
    cache = tok.__dict__.setdefault("_tracerl_native_wrap", {})
    key = (native.parser.name, tok.chat_template)
    if key not in cache:
        call = sample_call(native)
        head = [{"role": "user", "content": _USER}]
        try:
            prefix = _render(tok, head, native, True)
            full = _render(tok, head + [_assistant(call), {"role": "tool", "content": _PROBE_OBS}], native, True)
        except Exception:  # a template that rejects tool_calls or the tool role has no native mode
            full, prefix = "", None
        action, o = native.parser.format_calls([call]), full.find(_PROBE_OBS)
        ok = prefix is not None and full.startswith(prefix + action) and o >= len(prefix + action)
        cache[key] = (full[len(prefix + action):o], full[o + len(_PROBE_OBS):]) if ok else None
    return cache[key]


def render_native_prompt(tok, messages, native: NativeTools):
    """The episode's first tokens: the chat template with the tool schemas (PROMPT / TEMPLATE roles)."""
    return render_prompt(tok, messages, tools=native.schemas)


def render_tool_turn(tok, result: str, native: NativeTools, last_action_id: int | None):
    """A tool result's ids and roles, appended after the policy's (sampled, untouched) call."""
    wrap = tool_wrap(tok, native)
    if wrap is None:
        raise ValueError("the chat template does not render tool calls as the parser writes them; "
                         "run the conformance check (tracerl refuses such a template at run start)")
    before, after = wrap
    eos = tok.eos_token
    if last_action_id is not None and last_action_id == tok.eos_token_id and eos and before.startswith(eos):
        before = before[len(eos):]  # the policy already sampled the end-of-turn token
    b, body, a = (encode_observation(tok, s) if s else [] for s in (before, result, after))
    return (b + body + a, [TokenRole.TEMPLATE] * len(b) + [TokenRole.OBSERVATION] * len(body)
            + [TokenRole.TEMPLATE] * len(a))


def check_conformance(tok, native: NativeTools) -> str | None:
    """None when the template round-trips a tool call token for token; else why not, in one sentence."""
    name = f"the chat template with env.tool_parser {native.parser.name}"
    call = sample_call(native)
    head = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER}]
    convo = head + [_assistant(call), {"role": "tool", "content": _RESULT}]
    try:
        prefix, full = _render(tok, head, native, True), _render(tok, convo, native, True)
    except Exception as err:
        return f"{name} fails on a conversation with a tool call ({type(err).__name__}: {str(err)[:120]})"
    if not full.startswith(prefix):
        return f"{name} renders the prompt differently once a reply follows, so the sampled actions would not extend it"
    segment = full[len(prefix):full.find(_RESULT, len(prefix))]
    action = native.parser.format_calls([call])
    if call not in native.parser.parse(segment).calls:
        return (f"{name} drops the assistant's tool_calls (the {native.parser.name} parser finds no call in "
                f"{segment[:80]!r}); use a template with tool support or model.chat_template: hermes")
    if not segment.startswith(action) or tool_wrap(tok, native) is None:
        return (f"{name} renders a tool call as {segment[:80]!r}, not as the model writes it ({action[:80]!r}), so "
                "training on it would re-tokenize the actions; fix the template or set model.chat_template: hermes")
    ids, _ = render_native_prompt(tok, head, native)
    act = action_ids(tok, native, action)
    obs, _ = render_tool_turn(tok, _RESULT, native, act[-1] if act else None)
    incremental = ids + act + obs
    whole = list(tok(full, add_special_tokens=False)["input_ids"])
    if incremental != whole:
        k = next((i for i, (x, y) in enumerate(zip(incremental, whole)) if x != y), min(len(incremental), len(whole)))
        return (f"{name} gives different token ids rendered whole than prefix + sampled action + tool turn (first "
                f"difference at token {k}: {tok.decode(whole[k:k + 6])!r} vs {tok.decode(incremental[k:k + 6])!r}), so "
                "training would re-tokenize the actions; fix the template or set model.chat_template: hermes")
    return None


def tokenize_native_demo(tokenizer, demo) -> tuple[list[int], list[TokenRole]]:
    """A native-mode demonstration as the agent loop would have recorded it: the prompt with the tool
    schemas, each action's ids (ending with end-of-sequence where the policy must sample it to end the
    turn: the final answer, and every call of an end-of-turn family), each result in the tool role."""
    native = demo.native
    ids, roles = render_native_prompt(tokenizer, demo.messages, native)
    for action, obs in demo.turns:
        a = action_ids(tokenizer, native, action)
        ids, roles = ids + a, roles + [TokenRole.ACTION] * len(a)
        if obs is not None:
            o, o_roles = render_tool_turn(tokenizer, obs, native, a[-1] if a else None)
            ids, roles = ids + o, roles + o_roles
    return ids, roles

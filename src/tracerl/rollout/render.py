"""Render chat messages to token ids with per-token roles (PROMPT content, TEMPLATE headers)."""

from __future__ import annotations

from tracerl.contract.roles import TokenRole
from tracerl.envs.base import Message


def render_prompt(tokenizer, messages: list[Message], *, tools: list[dict] | None = None) -> tuple[list[int], list[TokenRole]]:
    """Apply the tokenizer's chat template (with the generation prompt) and label each token.

    A token whose characters fall inside a message's content is PROMPT; everything the template
    inserted (role headers, separators, the assistant header, the `tools` schemas of native tool
    mode) is TEMPLATE.
    """
    extra = {"tools": tools} if tools is not None else {}
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
    spans, cursor = [], 0
    for m in messages:
        start = text.find(m["content"], cursor)
        if start < 0:
            raise ValueError("the chat template altered a message's content; roles cannot be assigned")
        spans.append((start, start + len(m["content"])))
        cursor = start + len(m["content"])
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    roles = []
    for a, b in enc["offset_mapping"]:
        inside = any(s <= a and b <= e and b > a for s, e in spans)
        roles.append(TokenRole.PROMPT if inside else TokenRole.TEMPLATE)
    return list(enc["input_ids"]), roles


def encode_observation(tokenizer, text: str) -> list[int]:
    """Observations are tokenized on their own and appended; nothing before them is re-tokenized."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


_PROBE_USER, _PROBE_ACTION, _PROBE_OBS = "\x00u\x00", "\x00a\x00", "\x00o\x00"


def tool_role_wrap(tokenizer) -> tuple[str, str] | None:
    """(text before, text after) an observation when the chat template has a tool role, else None.

    The template "has a tool role" when its source names the role `tool` and rendering
    [user, assistant, tool] keeps the tool message's content intact. `before` closes the policy's
    turn and opens the tool turn; `after` closes it and opens the next assistant turn (the
    generation prompt). Cached on the tokenizer.
    """
    cached = getattr(tokenizer, "_tracerl_tool_wrap", False)
    if cached is not False:
        return cached
    wrap = None
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, str) and ("'tool'" in template or '"tool"' in template):
        try:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ACTION},
                 {"role": "tool", "content": _PROBE_OBS}], tokenize=False, add_generation_prompt=True)
            a, o = text.find(_PROBE_ACTION), text.find(_PROBE_OBS)
            if 0 <= a < o:
                wrap = (text[a + len(_PROBE_ACTION):o], text[o + len(_PROBE_OBS):])
        except Exception:  # a template that rejects the probe has no usable tool role
            wrap = None
    try:
        tokenizer._tracerl_tool_wrap = wrap
    except AttributeError:
        pass
    return wrap


def render_observation(tokenizer, text: str) -> tuple[list[int], list[TokenRole]]:
    """An observation's ids and roles, appended after the policy's turn.

    Through the chat template's tool role when it has one: the text that closes the policy's turn
    and opens the tool turn, and the text that closes it and reopens the assistant turn, are
    TEMPLATE; the observation itself is OBSERVATION. Without a tool role the observation is inline
    (all OBSERVATION). Each piece is tokenized on its own and appended (token in, token out):
    nothing already in the sequence, the policy's sampled ids included, is re-tokenized.
    """
    wrap = tool_role_wrap(tokenizer)
    body = encode_observation(tokenizer, text)
    if wrap is None:
        return body, [TokenRole.OBSERVATION] * len(body)
    before, after = (encode_observation(tokenizer, w) if w else [] for w in wrap)
    return (before + body + after,
            [TokenRole.TEMPLATE] * len(before) + [TokenRole.OBSERVATION] * len(body) + [TokenRole.TEMPLATE] * len(after))


def observation_bounds(roles: list[TokenRole]) -> tuple[int, int]:
    """[start, end) of the OBSERVATION tokens inside a rendered observation (its span's extent)."""
    inside = [i for i, r in enumerate(roles) if r == TokenRole.OBSERVATION]
    return (inside[0], inside[-1] + 1) if inside else (len(roles), len(roles))


def user_role_wrap(tokenizer) -> tuple[str, str] | None:
    """(text before, text after) a user message that follows the policy's turn, as the chat template
    renders [user, assistant, user] with the generation prompt; None when the template alters the
    probe. `before` closes the policy's turn and opens the user turn, `after` closes it and opens the
    next assistant turn. Cached on the tokenizer."""
    cached = getattr(tokenizer, "_tracerl_user_wrap", False)
    if cached is not False:
        return cached
    wrap = None
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ACTION},
             {"role": "user", "content": _PROBE_OBS}], tokenize=False, add_generation_prompt=True)
        a, o = text.find(_PROBE_ACTION), text.find(_PROBE_OBS)
        if 0 <= a < o:
            wrap = (text[a + len(_PROBE_ACTION):o], text[o + len(_PROBE_OBS):])
    except Exception:  # no chat template: the message goes inline
        wrap = None
    try:
        tokenizer._tracerl_user_wrap = wrap
    except AttributeError:
        pass
    return wrap


def render_user_turn(tokenizer, text: str, last_action_id: int | None) -> tuple[list[int], list[TokenRole]]:
    """An environment's next user message (a verifiers multi-turn env), appended after the policy's turn
    in the template's user role: the turn-closing and header text are TEMPLATE, the message OBSERVATION
    (never trained on). An end-of-turn token the policy already sampled is not added again. Each piece
    is tokenized on its own and appended; nothing already in the sequence is re-tokenized."""
    wrap = user_role_wrap(tokenizer)
    body = encode_observation(tokenizer, text)
    if wrap is None:
        return body, [TokenRole.OBSERVATION] * len(body)
    before, after = wrap
    eos = tokenizer.eos_token
    if last_action_id is not None and last_action_id == tokenizer.eos_token_id and eos and before.startswith(eos):
        before = before[len(eos):]
    b, a = (encode_observation(tokenizer, w) if w else [] for w in (before, after))
    return (b + body + a,
            [TokenRole.TEMPLATE] * len(b) + [TokenRole.OBSERVATION] * len(body) + [TokenRole.TEMPLATE] * len(a))

"""Render chat messages to token ids with per-token roles (PROMPT content, TEMPLATE headers)."""

from __future__ import annotations

from tracerl.contract.roles import TokenRole
from tracerl.envs.base import Message


def render_prompt(tokenizer, messages: list[Message]) -> tuple[list[int], list[TokenRole]]:
    """Apply the tokenizer's chat template (with the generation prompt) and label each token.

    A token whose characters fall inside a message's content is PROMPT; everything the template
    inserted (role headers, separators, the assistant header) is TEMPLATE.
    """
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
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

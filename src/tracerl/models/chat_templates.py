"""tracerl's documented Hermes-style chat template, for models whose own template has no tool support.

ChatML turns (`<|im_start|>role\\n...<|im_end|>\\n`, the tiny model's and SmolLM2's format) with tools as
Hermes 2 Pro / Qwen 2.5 list them:

    <|im_start|>system
    {system message}

    # Tools
    <tools>
    {one JSON schema per line}
    </tools>
    Call a tool as <tool_call>
    {"name": <tool name>, "arguments": <arguments object>}
    </tool_call><|im_end|>

An assistant message's `tool_calls` (arguments as a JSON object, as transformers expects) follow its
content, each `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, exactly what the `hermes`
parser writes and reads; a `tool` message is `<|im_start|>tool\\n<tool_response>\\n...\\n</tool_response><|im_end|>`.
Applied by `model.chat_template: hermes`, or in native tool mode when the tokenizer has no template.
"""

from __future__ import annotations

import hashlib

HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}# Tools\n<tools>\n"
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n"
    "Call a tool as <tool_call>\n{\"name\": <tool name>, \"arguments\": <arguments object>}\n</tool_call><|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' and loop.first %}"
    "{% elif m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{% for tc in m['tool_calls'] or [] %}{% set f = tc['function'] if tc['function'] is defined else tc %}"
    "<tool_call>\n{\"name\": {{ f['name'] | tojson }}, \"arguments\": {{ f['arguments'] | tojson }}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif m['role'] == 'tool' %}<|im_start|>tool\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HERMES_CALL_LINE = '{"name": <tool name>, "arguments": <arguments object>}'  # the instruction's example call
HERMES_SHA256 = hashlib.sha256(HERMES_TEMPLATE.encode()).hexdigest()


def apply_template_setting(tokenizer, setting: str, *, native: bool = False):
    """Install the template `model.chat_template` names (`auto`: the tokenizer's own, or tracerl's Hermes
    template in native mode when the tokenizer has none; `hermes`: tracerl's). Returns the tokenizer."""
    if setting == "hermes" or (native and not getattr(tokenizer, "chat_template", None)):
        missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in tokenizer.get_vocab()]
        if missing:
            tokenizer.add_special_tokens({"additional_special_tokens": missing})  # the model's embeddings must grow
        tokenizer.chat_template = HERMES_TEMPLATE
    return tokenizer

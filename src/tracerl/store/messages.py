"""A stored trajectory as an OpenAI `messages` conversation: the rows of an SFT file (`sft.data`).

`tracerl export RUN --format messages [--correct]` writes one `{"id", "messages", ...}` line per
episode, in the shape `train/sft_data.py` reads, so a run's good episodes can be trained on again
(rejection-sampling fine-tuning by hand, or a warm start for another model).

The tokens say which text was which: PROMPT runs before the first action are the system / user
messages (the chat template's header in front of each names its role), each ACTION run is an
assistant message (tool calls stay in the environment's grammar, as the policy wrote them), each
OBSERVATION run a tool message. Template tokens (role headers, separators) and padding are dropped,
and so is the tokenizer's end-of-sequence text at the end of an action. A truncated episode ends on
its last assistant message (a trailing tool message would train nothing).
"""

from __future__ import annotations

from typing import Any

from tracerl.contract import TokenRole


def _runs(traj) -> list[tuple[TokenRole, list[int]]]:
    out: list[tuple[TokenRole, list[int]]] = []
    for tok, role in zip(traj.token_ids, traj.roles):
        role = TokenRole(role)
        if role == TokenRole.PAD:
            continue
        if out and out[-1][0] == role:
            out[-1][1].append(tok)
        else:
            out.append((role, [tok]))
    return out


def _prompt_role(header: str, first: bool) -> str:
    """`system` or `user`, from the template text in front of a prompt message."""
    s, u = header.rfind("system"), header.rfind("user")
    if s < 0 and u < 0:
        return "system" if first and header else "user"
    return "system" if s > u else "user"


def conversation(traj, tokenizer) -> list[dict[str, str]] | None:
    """The episode as messages, or None when the policy wrote nothing (no assistant message)."""
    def text(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    ends = [t for t in (tokenizer.eos_token, tokenizer.pad_token) if t]
    msgs: list[dict[str, str]] = []
    header: list[int] = []
    acted = False
    for role, ids in _runs(traj):
        if role == TokenRole.TEMPLATE:
            header += ids
            continue
        content = text(ids)
        if role == TokenRole.ACTION:
            acted = True
            while any(content.endswith(e) for e in ends):
                content = content[: -len(next(e for e in ends if content.endswith(e)))]
            kind = "assistant"
        elif role == TokenRole.PROMPT and not acted:
            kind = _prompt_role(text(header), first=not msgs)
        else:  # an observation, or text the harness added after the first action
            kind = "tool"
        header = []
        if not content:
            continue
        if msgs and msgs[-1]["role"] == kind and kind in ("assistant", "tool"):
            msgs[-1]["content"] += content  # one turn split by template tokens stays one message
        else:
            msgs.append({"role": kind, "content": content})
    while msgs and msgs[-1]["role"] == "tool":
        msgs.pop()
    if not any(m["role"] == "assistant" for m in msgs):
        return None
    if msgs[0]["role"] == "system" and not any(m["role"] == "user" for m in msgs):
        msgs[0]["role"] = "user"
    return msgs


def messages_row(stage: str, step: int, traj, tokenizer) -> dict[str, Any] | None:
    """One line of an SFT file: the conversation, and where it came from (ignored by `sft.data`)."""
    msgs = conversation(traj, tokenizer)
    if msgs is None:
        return None
    return {"id": traj.task_id, "messages": msgs, "reward": float(traj.reward), "trajectory_id": traj.trajectory_id,
            "stage": stage, "step": step, "env_name": traj.env_name}

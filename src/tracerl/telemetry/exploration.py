"""Exploration: entropy of generated tokens, stratified by action type and advantage sign; diversity.

Action types (entropy is reported per action type, not only overall):

- `tool_call`  tokens inside a tool request (`<code>…</code>`, `<search>…</search>`, `<tool_call>…`),
- `answer`     tokens inside the final answer (`<answer>…</answer>`),
- `reasoning`  every other action token.

A classifier maps a trajectory to one label per action token, in position order. Two are provided:
`span_classifier` reads spans of kind "tool_call" / "answer" that the agent loop may record inside
its action spans; `tag_classifier(decode_pieces)` decodes each action token and finds the tags in the
text. An unclosed tag runs to the end of its action span (a truncated tool call is still a tool call).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracerl.contract import Trajectory
from tracerl.telemetry.align import action_positions

ACTION_TYPES = ("reasoning", "tool_call", "answer")
Classifier = Callable[[Trajectory], Sequence[str]]
TOOL_TAGS = ("code", "search", "python", "tool_call")
ANSWER_TAGS = ("answer",)


def span_classifier(traj: Trajectory) -> list[str]:
    """Labels from recorded spans of kind "tool_call" / "answer"; other action tokens are reasoning."""
    labels = ["reasoning"] * len(traj)
    for span in traj.spans:
        if span.kind in ("tool_call", "answer"):
            labels[span.start:span.end] = [span.kind] * (span.end - span.start)
    return [labels[i] for i in action_positions(traj)]


def has_typed_spans(trajectories: Sequence[Trajectory]) -> bool:
    return any(s.kind in ("tool_call", "answer") for t in trajectories for s in t.spans)


def tag_classifier(decode_pieces: Callable[[list[int]], list[str]], *, tool_tags: Sequence[str] = TOOL_TAGS,
                   answer_tags: Sequence[str] = ANSWER_TAGS) -> Classifier:
    """Classifier that decodes each action span token by token and labels tokens inside tags.

    `decode_pieces(ids)` returns one string per id (e.g. `[tok.decode([i]) for i in ids]`).
    A token belongs to a tag region when its characters overlap it.
    """
    kinds = {t: "tool_call" for t in tool_tags} | {t: "answer" for t in answer_tags}
    pattern = re.compile(r"<(" + "|".join(map(re.escape, kinds)) + r")\b[^>]*>.*?(?:</\1\s*>|$)", re.DOTALL)

    def classify(traj: Trajectory) -> list[str]:
        labels = ["reasoning"] * len(traj)
        for span in traj.spans:
            if span.kind != "action" or span.end <= span.start:
                continue
            pieces = decode_pieces(traj.token_ids[span.start:span.end])
            bounds = np.cumsum([0] + [len(p) for p in pieces])
            for m in pattern.finditer("".join(pieces)):
                a, b = m.span()
                for j in range(len(pieces)):
                    lo, hi = bounds[j], bounds[j + 1]
                    if lo < b and (hi > a or (lo == hi and a <= lo)):
                        labels[span.start + j] = kinds[m.group(1)]
        return [labels[i] for i in action_positions(traj)]

    return classify


def tokenizer_pieces(tokenizer: Any) -> Callable[[list[int]], list[str]]:
    """`decode_pieces` for a Hugging Face tokenizer: each id decoded on its own."""
    return lambda ids: [tokenizer.decode([i]) for i in ids]


def entropy_metrics(entropy: list[np.ndarray], *, labels: list[Sequence[str]] | None = None,
                    advantages: list[np.ndarray] | None = None) -> dict[str, float]:
    """Token-mean entropy over all action tokens and within each stratum present.

    `policy/entropy_<type>` per action type and `policy/entropy_adv_{pos,neg,zero}` by advantage
    sign; `policy/token_frac_<type>` is the share of action tokens of each type.
    """
    flat = np.concatenate(entropy) if entropy else np.zeros(0)
    if flat.size == 0:
        return {}
    out = {"policy/entropy": float(flat.mean())}
    if labels is not None:
        lab = np.asarray([x for seq in labels for x in seq])
        if lab.size != flat.size:
            raise ValueError(f"classifier returned {lab.size} labels for {flat.size} action tokens")
        for kind in ACTION_TYPES:
            sel = lab == kind
            out[f"policy/token_frac_{kind}"] = float(sel.mean())
            if sel.any():
                out[f"policy/entropy_{kind}"] = float(flat[sel].mean())
    if advantages is not None:
        adv = np.concatenate(advantages)
        for name, sel in (("pos", adv > 0), ("neg", adv < 0), ("zero", adv == 0)):
            if sel.any():
                out[f"policy/entropy_adv_{name}"] = float(flat[sel].mean())
    return out


def answer_key(traj: Trajectory, labels: Sequence[str] | None = None) -> Any:
    """What the episode answered: the verifier's extracted answer, else the answer-tagged token ids."""
    out = traj.verifier_output or {}
    for key in ("extracted_answer", "answer", "prediction", "pred"):
        if out.get(key) is not None:
            return str(out[key])
    if labels is not None:
        ids = tuple(traj.token_ids[i] for i, lab in zip(action_positions(traj), labels) if lab == "answer")
        return ids or None
    return None


def program_key(traj: Trajectory, labels: Sequence[str] | None = None) -> Any:
    """The episode's programs: its tool requests in order, else the tool-call-tagged token ids."""
    requests = tuple(s.tool_request for s in traj.spans if s.tool_request is not None)
    if requests:
        return requests
    if labels is not None:
        ids = tuple(traj.token_ids[i] for i, lab in zip(action_positions(traj), labels) if lab == "tool_call")
        return ids or None
    return None


def distinct_per_group(trajectories: Sequence[Trajectory], keys: Sequence[Any]) -> float:
    """Mean over groups of the number of distinct non-missing keys; NaN when no group has one."""
    groups: dict[str, set] = {}
    for t, k in zip(trajectories, keys):
        if k is not None:
            groups.setdefault(t.group_id, set()).add(k)
    return float(np.mean([len(s) for s in groups.values()])) if groups else math.nan


def diversity_metrics(trajectories: Sequence[Trajectory], labels: list[Sequence[str]] | None) -> dict[str, float]:
    lab = labels if labels is not None else [None] * len(trajectories)
    out = {}
    answers = distinct_per_group(trajectories, [answer_key(t, l) for t, l in zip(trajectories, lab)])
    programs = distinct_per_group(trajectories, [program_key(t, l) for t, l in zip(trajectories, lab)])
    if not math.isnan(answers):
        out["groups/distinct_answers"] = answers
    if not math.isnan(programs):
        out["groups/distinct_programs"] = programs
    return out

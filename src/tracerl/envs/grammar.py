"""Tool-call grammars: parse one policy turn into a structured action.

A malformed turn is not an exception: `parse_tagged` returns an `Action` with kind "invalid"
and a reason, which the environment turns into an `invalid_action` observation.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Action:
    kind: str  # a tag name ("code", "answer", "search", ...) or "invalid"
    body: str = ""
    reason: str = ""


def parse_tagged(text: str, tags: tuple[str, ...]) -> Action:
    """The turn must be exactly one `<tag>body</tag>` for a known tag (whitespace around is fine)."""
    stripped = text.strip()
    m = re.fullmatch(r"<(\w+)>(.*)</(\w+)>", stripped, flags=re.DOTALL)
    if not m:
        return Action("invalid", reason="expected one <tag>...</tag> call")
    open_tag, body, close_tag = m.groups()
    if open_tag != close_tag:
        return Action("invalid", reason=f"<{open_tag}> closed by </{close_tag}>")
    if open_tag not in tags:
        return Action("invalid", reason=f"unknown tool <{open_tag}>; use one of " + ", ".join(f"<{t}>" for t in tags))
    if re.search(r"</?\w+>", body):
        return Action("invalid", reason="nested tags")
    return Action(open_tag, body.strip())

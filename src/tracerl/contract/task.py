"""A task is data, never code (docs/architecture.md, "Tasks and environments")."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

SPLITS = ("train", "heldout")


@dataclasses.dataclass(frozen=True)
class Task:
    """One problem. `answer` and `tests` are hidden from the policy; `split` is fixed at creation."""

    id: str
    source: str
    prompt: str | list[dict[str, str]]
    split: str = "train"
    source_revision: str = ""
    answer: Any = None
    tests: Any = None
    difficulty: float | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    license: str = "Apache-2.0"

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"task {self.id!r} has split {self.split!r}; use one of {SPLITS}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Task":
        return cls(**d)

    def prompt_text(self) -> str:
        """The prompt as plain text: the string itself, or the message contents joined by newlines."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(str(m.get("content", "")) for m in self.prompt)


def tasks_sha256(tasks: list[Task]) -> str:
    """Content hash of a task list, recorded in the manifest."""
    h = hashlib.sha256()
    for t in tasks:
        h.update(json.dumps(t.to_dict(), sort_keys=True, default=str).encode())
    return h.hexdigest()

"""What every verifier shares: its result type, its protocol, and duck-typed access to inputs.

A verifier reads a task (a mapping or an object with attributes such as `answer`, `tests`) and a
trajectory (a str, or any object with `action_text` or `text`); it never depends on the contract
package, so environments may pass whatever they hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class VerifierResult:
    """Named reward components, as produced (before any weighting), and the raw evidence."""

    components: dict[str, float]
    raw: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in self.components.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"verifier component {name!r} must be a finite number, got {value!r}")

    @property
    def reason(self) -> str:
        return str(self.raw.get("reason", ""))


@runtime_checkable
class Verifier(Protocol):
    """`verify(task, trajectory) -> VerifierResult`; `primary` names the component that decides
    whether an output was rewarded (audits count it); `audit_cases()` is its adversarial and
    known-good set."""

    name: str
    revision: str
    components: tuple[str, ...]
    primary: str

    def verify(self, task: Any, trajectory: Any) -> VerifierResult: ...

    def audit_cases(self) -> list[AuditCase]: ...


@dataclass(frozen=True)
class AuditCase:
    """One output a verifier must reward (`should_reward=True`) or must not, with the attack it stands for."""

    name: str
    task: Any
    output: str
    should_reward: bool
    attack: str = ""
    """For adversarial cases: the trick, in one sentence (shown in `tracerl audit`)."""


def text_of(trajectory: Any) -> str:
    """The policy's text: a str itself, else `.action_text`, else `.text` (attribute or key)."""
    if isinstance(trajectory, str):
        return trajectory
    for name in ("action_text", "text"):
        value = getattr(trajectory, name, None)
        if value is None and isinstance(trajectory, Mapping):
            value = trajectory.get(name)
        if callable(value):
            value = value()
        if isinstance(value, str):
            return value
    raise TypeError(f"cannot read the policy's text from a {type(trajectory).__name__}; "
                    "pass a str or an object with an `action_text` or `text` attribute")


def task_field(task: Any, name: str, default: Any = None) -> Any:
    """A field of a task given as a mapping or an object; `default` when absent."""
    if isinstance(task, Mapping):
        return task.get(name, default)
    return getattr(task, name, default)


def rejected(components: tuple[str, ...], reason: str, **raw: Any) -> VerifierResult:
    """All components zero, with the reason recorded."""
    return VerifierResult({c: 0.0 for c in components}, {"reason": reason, **raw})

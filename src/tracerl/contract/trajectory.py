"""The trajectory record: one episode from reset to termination (docs/architecture.md, "The trajectory contract")."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

from tracerl.contract.roles import TerminalReason, TokenRole


def ids_sha256(token_ids: list[int]) -> str:
    """Hash of a token id sequence; the engine records it for each action it samples."""
    return hashlib.sha256(",".join(map(str, token_ids)).encode()).hexdigest()


@dataclasses.dataclass
class Span:
    """A turn, tool request or observation over token positions [start, end)."""

    span_id: int
    kind: str  # "action" | "observation" | "prompt" | "template" | "turn"
    start: int
    end: int
    parent_span_id: int | None = None
    tool_name: str | None = None
    tool_request: str | None = None
    tool_status: str | None = None
    tool_latency_s: float | None = None
    tool_response_sha256: str | None = None
    state_hash: str | None = None
    sampled_ids_sha256: str | None = None  # action spans: hash of the ids the engine sampled


@dataclasses.dataclass
class Trajectory:
    """Parallel per-token arrays plus spans and per-episode provenance."""

    trajectory_id: str
    group_id: str
    task_id: str
    env_name: str
    token_ids: list[int] = dataclasses.field(default_factory=list)
    roles: list[TokenRole] = dataclasses.field(default_factory=list)
    behavior_logprobs: list[float] = dataclasses.field(default_factory=list)
    policy_versions: list[int] = dataclasses.field(default_factory=list)
    spans: list[Span] = dataclasses.field(default_factory=list)
    task_source: str = ""
    task_revision: str = ""
    split: str = "train"
    env_revision: str = ""
    reset_seed: int = 0
    initial_state_hash: str = ""
    reward_components: dict[str, float] = dataclasses.field(default_factory=dict)
    reward_weights: dict[str, float] = dataclasses.field(default_factory=dict)
    reward: float = 0.0
    verifier_name: str = ""
    verifier_revision: str = ""
    verifier_output: dict[str, Any] = dataclasses.field(default_factory=dict)
    terminal_reason: TerminalReason | None = None
    truncated: bool = False
    attempt: int = 0
    retry_lineage: list[str] = dataclasses.field(default_factory=list)
    wall_start: float = 0.0
    wall_end: float = 0.0
    sampling: dict[str, Any] = dataclasses.field(default_factory=dict)
    tokenizer_sha256: str = ""
    chat_template_sha256: str = ""

    # -- building -------------------------------------------------------------------------
    def append(self, token_ids: list[int], role: TokenRole, logprobs: list[float] | None = None,
               policy_version: int = -1) -> tuple[int, int]:
        """Append tokens of one role; returns their [start, end) positions."""
        start = len(self.token_ids)
        self.token_ids.extend(int(t) for t in token_ids)
        self.roles.extend([role] * len(token_ids))
        if role == TokenRole.ACTION:
            assert logprobs is not None and len(logprobs) == len(token_ids)
            self.behavior_logprobs.extend(float(x) for x in logprobs)
            self.policy_versions.extend([policy_version] * len(token_ids))
        else:
            self.behavior_logprobs.extend([math.nan] * len(token_ids))
            self.policy_versions.extend([-1] * len(token_ids))
        return start, len(self.token_ids)

    def add_span(self, kind: str, start: int, end: int, **fields: Any) -> Span:
        span = Span(span_id=len(self.spans), kind=kind, start=start, end=end, **fields)
        self.spans.append(span)
        return span

    def set_reward(self, components: dict[str, float], weights: dict[str, float]) -> None:
        """Record raw components and weights; the reward is their weighted sum."""
        self.reward_components = {k: float(v) for k, v in components.items()}
        self.reward_weights = {k: float(weights.get(k, 0.0)) for k in components}
        self.reward = float(sum(self.reward_weights[k] * self.reward_components[k] for k in components))

    def finish(self, reason: TerminalReason) -> None:
        self.terminal_reason = reason
        self.truncated = reason.is_truncation

    # -- views ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_action_tokens(self) -> int:
        return sum(1 for r in self.roles if r == TokenRole.ACTION)

    @property
    def trainable(self) -> bool:
        """Infrastructure failures never carry reward into training."""
        return self.terminal_reason != TerminalReason.INFRA_FAILURE

"""What the gateway records: one `CallRecord` (span) per served call, one `Episode` per agent episode."""

from __future__ import annotations

import dataclasses
from typing import Any

from tracerl.contract.roles import TerminalReason, TokenRole


@dataclasses.dataclass
class CallRecord:
    """One served call: the exact prompt ids the engine saw, what it sampled, and under which weights."""

    span_id: str
    kind: str  # "chat" | "completion"
    episode_id: str | None
    parent_span_id: str | None
    model: str
    prompt_ids: list[int]
    prompt_roles: list[TokenRole]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    policy_version: int
    sampling: dict[str, Any]
    started: float
    latency_s: float
    entropies: list[float] = dataclasses.field(default_factory=list)  # of the sampling distribution (diagnostic)
    text: str = ""  # the completion decoded (special tokens skipped): what a verifier reads
    messages: list[dict] | None = None  # chat: the canonical conversation it answered
    reply: dict | None = None  # chat: the assistant message returned
    tool_names: list[str] = dataclasses.field(default_factory=list)  # tools the extension's observations answer
    extends_span: str | None = None  # the call whose prompt + completion this prompt extends token for token
    top_logprobs: list[list[tuple[int, float]]] | None = None  # per token: the k likeliest (id, log-prob), when asked
    user: str | None = None  # the request's `user` (OpenAI's end-user id), kept as sent
    metadata: dict[str, Any] | None = None  # the request's `metadata`, kept as sent
    engine: int = 0  # which of the gateway's engines sampled it (serve/engine_pool.py; 0: the only one)

    def as_json(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("entropies")
        d.pop("top_logprobs")
        d["prompt_roles"] = [TokenRole(r).label for r in self.prompt_roles]
        return d


@dataclasses.dataclass
class Episode:
    episode_id: str
    task_id: str | None
    group_id: str | None
    metadata: dict[str, Any]
    started: float
    last_activity: float
    calls: list[CallRecord] = dataclasses.field(default_factory=list)
    finished: bool = False
    terminal_reason: TerminalReason | None = None
    reward_components: dict[str, float] = dataclasses.field(default_factory=dict)
    reward_weights: dict[str, float] = dataclasses.field(default_factory=dict)
    verifier_name: str = ""
    verifier_revision: str = ""
    verifier_output: dict[str, Any] = dataclasses.field(default_factory=dict)
    ended: float = 0.0
    trajectories: list = dataclasses.field(default_factory=list)  # built once, when it ends
    merges: int = 0  # calls appended to the previous call's trajectory
    splits: int = 0  # calls that began a new trajectory of this episode (after the first)

    def summary(self) -> dict:
        return {"episode_id": self.episode_id, "task_id": self.task_id, "group_id": self.group_id,
                "finished": self.finished, "calls": len(self.calls),
                "terminal_reason": self.terminal_reason.value if self.terminal_reason else None,
                "reward": sum(self.reward_weights.get(k, 0.0) * v for k, v in self.reward_components.items()),
                "reward_components": self.reward_components, "trajectories": len(self.trajectories),
                "merges": self.merges, "splits": self.splits, "metadata": self.metadata}

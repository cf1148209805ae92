"""Token roles and episode endings: the two enums every other part of tracerl speaks."""

from __future__ import annotations

import enum


class TokenRole(enum.IntEnum):
    """Where a token came from. The loss mask is derived from this, never stored beside it."""

    PROMPT = 0  # system / user / task text
    ACTION = 1  # sampled by the policy: the only trainable role
    OBSERVATION = 2  # returned by a tool or the environment
    TEMPLATE = 3  # inserted by the harness (chat headers between turns); not trainable
    PAD = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> "TokenRole":
        return cls[label.upper()]


class TerminalReason(str, enum.Enum):
    """Why an episode ended. Truncation is not failure; an infrastructure fault is not a reward."""

    EOS = "eos"  # the policy ended its answer
    ENV_SUCCESS = "env_success"
    ENV_FAILURE = "env_failure"
    MAX_TOKENS = "max_tokens"
    MAX_TURNS = "max_turns"
    WALL_TIMEOUT = "wall_timeout"
    INFRA_FAILURE = "infra_failure"
    SAFETY_STOP = "safety_stop"

    @property
    def is_truncation(self) -> bool:
        return self in TRUNCATIONS


TRUNCATIONS = frozenset({TerminalReason.MAX_TOKENS, TerminalReason.MAX_TURNS, TerminalReason.WALL_TIMEOUT})

"""Masks derived from token roles: the single source of truth for what is trained on."""

from __future__ import annotations

from collections.abc import Sequence

from tracerl.contract.roles import TokenRole


def loss_mask(roles: Sequence[int]) -> list[int]:
    """1 on ACTION tokens (sampled by the policy), 0 on prompt, observation, template and pad."""
    return [1 if r == TokenRole.ACTION else 0 for r in roles]


def attention_mask(roles: Sequence[int]) -> list[int]:
    """1 on every real token, 0 on padding."""
    return [0 if r == TokenRole.PAD else 1 for r in roles]

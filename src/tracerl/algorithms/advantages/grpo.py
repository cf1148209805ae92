"""GRPO group-relative advantage, and its Dr.GRPO centred form (`scale="none"`).

Source: Shao et al. 2024, DeepSeekMath (GRPO); Liu et al. 2025, "Understanding R1-Zero-Like Training:
A Critical Perspective" (Dr.GRPO). Survey §2.2 and §8.1:

    A_i = (R_i − mean_g R) / (std_g R + eps)        (scale="std", population std)
    A_i =  R_i − mean_g R                           (scale="none", Dr.GRPO)

Departures: members of a group whose rewards are all exactly equal get exactly 0 rather than
`rounding residue / eps` (the group carries no relative signal either way). The std is the population
std (divide by G), as in the design literature's worked example, not torch's default unbiased std.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from tracerl.algorithms.groups import as_float, group_index, relative, segment_all_equal
from tracerl.algorithms.registry import register


def grpo_with_stats(
    rewards_B: torch.Tensor, group_ids_B: torch.Tensor | Sequence[Hashable], *, scale: str = "std", eps: float = 1e-6
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Like `grpo` but also returns detached stats (groups, zero-signal groups, advantage spread)."""
    rewards_B = as_float(rewards_B)
    idx, n = group_index(group_ids_B, rewards_B.device)
    if idx.numel() != rewards_B.numel():
        raise ValueError(f"{rewards_B.numel()} rewards but {idx.numel()} group ids")
    adv_B = relative(rewards_B, idx, n, scale=scale, eps=eps)
    flat = segment_all_equal(rewards_B, idx, n)
    stats = {
        "groups": torch.tensor(float(n)),
        "zero_signal_groups": flat.sum().to(torch.float32),
        "adv_abs_mean": adv_B.detach().abs().mean() if adv_B.numel() else torch.tensor(0.0),
    }
    return adv_B, stats


@register(
    "grpo",
    kind="advantage",
    description="group-relative advantage (R - group mean) / (group std + eps); scale='none' is Dr.GRPO",
    source="Shao et al. 2024 (DeepSeekMath); Liu et al. 2025 (Dr.GRPO)",
)
def grpo(
    rewards_B: torch.Tensor, group_ids_B: torch.Tensor | Sequence[Hashable], *, scale: str = "std", eps: float = 1e-6
) -> torch.Tensor:
    """Group-relative advantage per response, shape (B,). See the module docstring for the formula."""
    return grpo_with_stats(rewards_B, group_ids_B, scale=scale, eps=eps)[0]


@register(
    "dr_grpo",
    kind="advantage",
    description="Dr.GRPO centred advantage R - group mean (no std division); pair with aggregation='fixed'",
    source="Liu et al. 2025, Understanding R1-Zero-Like Training (Dr.GRPO)",
)
def dr_grpo(rewards_B: torch.Tensor, group_ids_B: torch.Tensor | Sequence[Hashable]) -> torch.Tensor:
    """`grpo(..., scale="none")` under its own name so a recipe can select it directly."""
    return grpo(rewards_B, group_ids_B, scale="none")

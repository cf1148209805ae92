"""RLOO: leave-one-out baseline, A_i = R_i − mean_{j≠i, j∈g(i)} R_j.

Source: Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
from Human Feedback in LLMs" (RLOO); Kool et al. 2019 ("Buy 4 REINFORCE samples, get a baseline for
free"). Survey §2.2.

Identity used: with n members and group sum S, the leave-one-out mean is (S − R_i)/(n − 1), so
A_i = n/(n − 1) · (R_i − mean). Departure: a singleton group has no leave-one-out baseline; its
member gets advantage 0 (it carries no relative signal) rather than NaN.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from tracerl.algorithms.groups import as_float, group_index, segment_count, segment_sum
from tracerl.algorithms.registry import register


def loo_baseline(values_B: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of the other members of each element's group; the element itself where it is alone."""
    total = segment_sum(values_B, idx, n)[idx]
    count = segment_count(idx, n, values_B.dtype)[idx]
    others = (total - values_B) / (count - 1).clamp_min(1)
    return torch.where(count > 1, others, values_B)


@register(
    "rloo",
    kind="advantage",
    description="REINFORCE leave-one-out: reward minus the mean reward of the other group members",
    source="Ahmadian et al. 2024 (RLOO); Kool et al. 2019",
)
def rloo(rewards_B: torch.Tensor, group_ids_B: torch.Tensor | Sequence[Hashable]) -> torch.Tensor:
    """Leave-one-out advantage per response, shape (B,)."""
    rewards_B = as_float(rewards_B)
    idx, n = group_index(group_ids_B, rewards_B.device)
    if idx.numel() != rewards_B.numel():
        raise ValueError(f"{rewards_B.numel()} rewards but {idx.numel()} group ids")
    return rewards_B - loo_baseline(rewards_B, idx, n)

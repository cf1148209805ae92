"""REINFORCE++ advantages: global-batch normalisation, and the group-baseline variant.

Source: Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models"
(as exposed by OpenRLHF).

    reinforce_pp:           A_i = (R_i − mean_batch R) / (std_batch R + eps)
    reinforce_pp_baseline:  A_i = (R_i − mean_g R) / (std_batch(R − mean_g R) + eps)

Departures: outcome-level only (one reward per response, broadcast to its tokens); the paper's
token-level KL shaping of the reward is not folded in here — tracerl keeps the KL as a separate loss
term (`losses.kl_loss`). Statistics are over responses, each counted once, not over tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from tracerl.algorithms.groups import as_float, group_index, segment_mean
from tracerl.algorithms.registry import register


def _batch_whiten(x_B: torch.Tensor, eps: float) -> torch.Tensor:
    std = x_B.std(unbiased=False) if x_B.numel() > 1 else torch.zeros((), dtype=x_B.dtype)
    return x_B / (std + eps)


@register("reinforce_pp", kind="advantage",
          description="REINFORCE++: rewards normalised by the mean and std of the whole batch (no groups)",
          source="Hu 2025 (REINFORCE++); OpenRLHF")
def reinforce_pp(rewards_B: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """Global-batch normalised advantage per response."""
    rewards_B = as_float(rewards_B)
    return _batch_whiten(rewards_B - rewards_B.mean(), eps)


@register("reinforce_pp_baseline", kind="advantage",
          description="REINFORCE++-baseline: subtract the group mean, then divide by the batch std",
          source="Hu 2025 (REINFORCE++-baseline); OpenRLHF")
def reinforce_pp_baseline(
    rewards_B: torch.Tensor, group_ids_B: torch.Tensor | Sequence[Hashable], *, eps: float = 1e-6
) -> torch.Tensor:
    """Group-mean baseline with a batch-wide scale, so one group's spread does not set its own scale."""
    rewards_B = as_float(rewards_B)
    idx, n = group_index(group_ids_B, rewards_B.device)
    if idx.numel() != rewards_B.numel():
        raise ValueError(f"{rewards_B.numel()} rewards but {idx.numel()} group ids")
    return _batch_whiten(rewards_B - segment_mean(rewards_B, idx, n)[idx], eps)

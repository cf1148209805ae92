"""PRIME: implicit process rewards with separate leave-one-out baselines for process and outcome.

Source: Cui et al. 2025, "Process Reinforcement through Implicit Rewards" (PRIME).

    r_φ,t = β · (log π_φ(y_t) − log π_ref(y_t))                        implicit process reward
    r̄_φ,j = mean over rollout j's selected tokens of r_φ
    A_i,t = Σ_{u≥t} γ^{u−t} (r_φ,i,u − mean_{j≠i} r̄_φ,j)  +  (R_i − mean_{j≠i} R_j)

The sum over u runs over rollout i's selected tokens only (observation and padding positions are
skipped), and the advantage is 0 off the mask. The process and outcome baselines are kept apart, as
the paper stresses, because their scales differ. Departure: in a singleton group the leave-one-out
baselines are undefined; the rollout's own mean is used, making both components centred on itself.
Training π_φ (binary cross-entropy on the sequence-level implicit-reward logit) is not part of this
function; it only turns log-probabilities into advantages.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from tracerl.algorithms.advantages.rloo import loo_baseline
from tracerl.algorithms.groups import as_float, group_index
from tracerl.algorithms.registry import register


def discounted_suffix_sum(x_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float) -> torch.Tensor:
    """Σ_{u≥t, mask} γ^{(#selected steps between t and u)} x_u at selected t; 0 elsewhere."""
    mask = mask_BT.bool()
    out = torch.zeros_like(x_BT)
    carry = torch.zeros(x_BT.shape[0], dtype=x_BT.dtype, device=x_BT.device)
    for t in range(x_BT.shape[1] - 1, -1, -1):
        m = mask[:, t]
        val = x_BT[:, t] + gamma * carry
        out[:, t] = torch.where(m, val, torch.zeros_like(val))
        carry = torch.where(m, val, carry)
    return out


@register("prime", kind="advantage",
          description="PRIME: implicit process reward beta*log(pi_phi/pi_ref) with leave-one-out process and outcome baselines",
          source="Cui et al. 2025 (PRIME)")
def prime(
    prm_logprobs_BT: torch.Tensor,
    ref_logprobs_BT: torch.Tensor,
    outcome_rewards_B: torch.Tensor,
    group_ids_B: torch.Tensor | Sequence[Hashable],
    mask_BT: torch.Tensor,
    *,
    beta: float,
    gamma: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(adv_BT, stats) — detached advantages combining the process and outcome components."""
    with torch.no_grad():
        mask = mask_BT.bool()
        diff = torch.where(mask, prm_logprobs_BT - ref_logprobs_BT, torch.zeros_like(prm_logprobs_BT))
        r_phi = beta * diff
        lengths = mask.sum(dim=1).clamp_min(1).to(r_phi.dtype)
        r_bar = r_phi.sum(dim=1) / lengths
        rewards = as_float(outcome_rewards_B).to(r_phi.dtype)
        idx, n = group_index(group_ids_B, r_phi.device)
        if idx.numel() != r_phi.shape[0]:
            raise ValueError(f"{r_phi.shape[0]} rollouts but {idx.numel()} group ids")
        process = discounted_suffix_sum(r_phi - loo_baseline(r_bar, idx, n)[:, None], mask_BT, gamma)
        outcome = rewards - loo_baseline(rewards, idx, n)
        adv = torch.where(mask, process + outcome[:, None], torch.zeros_like(process))
        stats = {
            "implicit_reward_mean": (r_phi.sum() / mask.sum().clamp_min(1)),
            "process_adv_abs_mean": (process.abs().sum() / mask.sum().clamp_min(1)),
            "outcome_adv_abs_mean": outcome.abs().mean(),
        }
    return adv, stats

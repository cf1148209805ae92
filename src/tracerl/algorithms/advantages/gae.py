"""Generalized advantage estimation over the selected (action) positions of each row.

Source: Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", eqs. 16 and 19; a terminal step bootstraps
from 0 and a truncated one from its value, over action positions only.
Decoupled λ and the length-adaptive policy λ are VAPO's (Yue et al. 2025, "VAPO: Efficient and Reliable
Reinforcement Learning for Advanced Reasoning Tasks") after Seed1.5-Thinking:
λ_value = 1 for the value target, λ_policy = 1 − 1/(α·l) with l the response length.

The steps of row b are its positions with mask 1, in order; positions with mask 0 (prompt, tool
observation, template, padding) are skipped, so an observation between two actions does not break
the recursion. For consecutive steps t → t':

    δ_t = r_t + γ·V_{t'} − V_t,      A_t = δ_t + γ·λ·A_{t'},      returns_t = A_t + V_t

After the last step, V_next is 0 for a natural end (terminated) and `bootstrap_values_B[b]` for a
truncated row; a truncation must never be treated as terminal merely to erase the bootstrap.
Rewards and values at masked-out positions are ignored; outputs there are 0. λ may be a float or a
per-row tensor (B,).
"""

from __future__ import annotations

import torch

from tracerl.algorithms.registry import register


def _gae(rewards_BT, values_BT, mask_BT, gamma, lam, bootstrap_values_B, truncated_B):
    B, T = rewards_BT.shape
    mask = mask_BT.bool()
    r = torch.where(mask, rewards_BT, torch.zeros_like(rewards_BT))
    v = torch.where(mask, values_BT, torch.zeros_like(values_BT))
    next_value = torch.zeros(B, dtype=v.dtype, device=v.device)
    if bootstrap_values_B is not None:
        trunc = torch.ones(B, dtype=torch.bool, device=v.device) if truncated_B is None else truncated_B.bool()
        next_value = torch.where(trunc.to(v.device), bootstrap_values_B.to(v.device, v.dtype), next_value)
    lam_B = torch.as_tensor(lam, dtype=v.dtype, device=v.device).expand(B)
    next_adv = torch.zeros_like(next_value)
    adv = torch.zeros_like(v)
    for t in range(T - 1, -1, -1):
        m = mask[:, t]
        a = r[:, t] + gamma * next_value - v[:, t] + gamma * lam_B * next_adv
        adv[:, t] = torch.where(m, a, torch.zeros_like(a))
        next_value = torch.where(m, v[:, t], next_value)
        next_adv = torch.where(m, a, next_adv)
    returns = torch.where(mask, adv + v, torch.zeros_like(adv))
    return adv, returns


def _check(rewards_BT, values_BT, mask_BT):
    if not (rewards_BT.dim() == 2 and rewards_BT.shape == values_BT.shape == mask_BT.shape):
        raise ValueError(
            f"rewards {tuple(rewards_BT.shape)}, values {tuple(values_BT.shape)} and mask {tuple(mask_BT.shape)} "
            "must be equal (B, T) shapes"
        )


@register("gae", kind="advantage",
          description="generalized advantage estimation over masked steps; terminal vs truncated bootstrap",
          source="Schulman et al. 2016 (GAE, eqs. 16, 19)")
def gae(
    rewards_BT: torch.Tensor,
    values_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    gamma: float,
    lam: float | torch.Tensor,
    bootstrap_values_B: torch.Tensor | None = None,
    truncated_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(adv_BT, returns_BT), both detached. `bootstrap_values_B` applies only to rows with `truncated_B`
    (or to every row when `truncated_B` is None)."""
    _check(rewards_BT, values_BT, mask_BT)
    with torch.no_grad():
        return _gae(rewards_BT.detach(), values_BT.detach(), mask_BT, gamma, lam, bootstrap_values_B, truncated_B)


def length_adaptive_lambda(lengths_B: torch.Tensor, *, alpha: float) -> torch.Tensor:
    """VAPO's policy λ = 1 − 1/(α·l) per response (clamped at 0 for l < 1/α)."""
    lengths = torch.as_tensor(lengths_B).to(torch.get_default_dtype())
    return (1.0 - 1.0 / (alpha * lengths.clamp_min(1))).clamp_min(0.0)


@register("gae_decoupled", kind="advantage",
          description="GAE with separate lambdas: policy advantage with lam_policy, value target with lam_value",
          source="Yue et al. 2025 (VAPO); Seed1.5-Thinking (lam_value=1, lam_policy=0.95)")
def gae_decoupled(
    rewards_BT: torch.Tensor,
    values_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    gamma: float,
    lam_policy: float | torch.Tensor,
    lam_value: float = 1.0,
    bootstrap_values_B: torch.Tensor | None = None,
    truncated_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(policy adv_BT computed with lam_policy, value returns_BT computed with lam_value)."""
    adv, _ = gae(rewards_BT, values_BT, mask_BT, gamma=gamma, lam=lam_policy,
                 bootstrap_values_B=bootstrap_values_B, truncated_B=truncated_B)
    _, returns = gae(rewards_BT, values_BT, mask_BT, gamma=gamma, lam=lam_value,
                     bootstrap_values_B=bootstrap_values_B, truncated_B=truncated_B)
    return adv, returns


@register("vapo_gae", kind="advantage",
          description="decoupled GAE with length-adaptive policy lambda = 1 - 1/(alpha * length)",
          source="Yue et al. 2025, VAPO (length-adaptive GAE)")
def vapo_gae(
    rewards_BT: torch.Tensor,
    values_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    alpha: float,
    gamma: float = 1.0,
    lam_value: float = 1.0,
    bootstrap_values_B: torch.Tensor | None = None,
    truncated_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoupled GAE where each row's policy λ comes from its number of selected tokens."""
    lam_policy = length_adaptive_lambda(mask_BT.bool().sum(dim=1), alpha=alpha).to(values_BT.dtype)
    return gae_decoupled(rewards_BT, values_BT, mask_BT, gamma=gamma, lam_policy=lam_policy, lam_value=lam_value,
                         bootstrap_values_B=bootstrap_values_B, truncated_B=truncated_B)

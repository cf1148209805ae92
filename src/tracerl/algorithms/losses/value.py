"""Clipped value loss for a learned critic (PPO/VAPO), and VAPO's positive-example NLL term.

Value loss, per token (Schulman et al. 2017 as implemented in OpenAI baselines):

    v_clip = old_V + clip(V − old_V, −ε_v, ε_v)
    ℓ = ½ · max((V − R)², (v_clip − R)²)          (plain ½ (V − R)² when clip is None)

Positive-example NLL (Yue et al. 2025, VAPO; Seed1.5-Thinking):
L = L_PPO + μ · L_NLL with L_NLL the token-mean negative log-likelihood of the selected tokens of
responses whose reward exceeds `threshold` (successful samples). The caller adds μ·L_NLL.
"""

from __future__ import annotations

import torch

from tracerl.algorithms.losses.aggregate import aggregate, masked_mean
from tracerl.algorithms.registry import register


@register("value_loss", kind="loss",
          description="clipped value loss 0.5 * max((V-R)^2, (clip(V, V_old +- eps) - R)^2)",
          source="Schulman et al. 2017 (PPO, baselines implementation); Yue et al. 2025 (VAPO)")
def value_loss(
    values_BT: torch.Tensor,
    old_values_BT: torch.Tensor,
    returns_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip: float | None = 0.2,
    aggregation: str = "token",
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss to minimise and detached stats (clip fraction, explained variance)."""
    mask = mask_BT.bool()
    zeros = torch.zeros_like(values_BT)
    target = torch.where(mask, returns_BT.detach(), zeros)
    old = torch.where(mask, old_values_BT.detach(), zeros)
    v = torch.where(mask, values_BT, zeros)
    unclipped = (v - target).pow(2)
    if clip is None:
        per_token = 0.5 * unclipped
        clipped_frac = torch.tensor(0.0)
    else:
        v_clip = old + (v - old).clamp(-clip, clip)
        clipped = (v_clip - target).pow(2)
        per_token = 0.5 * torch.maximum(unclipped, clipped)
        clipped_frac = masked_mean((clipped > unclipped).to(v.dtype).detach(), mask_BT)
    loss = aggregate(per_token, mask_BT, aggregation, max_len)
    with torch.no_grad():
        resid = target - v.detach()
        var_t = masked_mean((target - masked_mean(target, mask_BT)).pow(2), mask_BT)
        var_r = masked_mean((resid - masked_mean(resid, mask_BT)).pow(2), mask_BT)
        # constant returns (every episode the same reward) leave only rounding in var_t: undefined, not −1e10
        explained = 1 - var_r / var_t if var_t > 1e-8 else torch.tensor(float("nan"))
    return loss, {"value_loss": loss.detach(), "value_clip_frac": clipped_frac, "explained_variance": explained}


@register("positive_nll", kind="loss",
          description="VAPO positive-example NLL: token-mean -log p over responses with reward above a threshold",
          source="Yue et al. 2025 (VAPO); Seed1.5-Thinking")
def positive_nll(
    logprobs_BT: torch.Tensor, mask_BT: torch.Tensor, rewards_B: torch.Tensor, *, threshold: float = 0.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-mean NLL of the successful responses' selected tokens (0 with a gradient path if none)."""
    positive = torch.as_tensor(rewards_B, device=logprobs_BT.device) > threshold
    sel = mask_BT.bool() & positive[:, None]
    loss = aggregate(-logprobs_BT, sel, "token")
    return loss, {"positive_nll": loss.detach(), "positive_responses": positive.sum().float()}

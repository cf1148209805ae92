"""Decoupled PPO (AReaL): behaviour correction times a surrogate clipped around the proximal policy.

Source: Fu et al. 2025, "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language
Reasoning". Three policies: π_beh sampled the token, π_prox is the snapshot
before this update (the trust-region centre), π_θ is being trained.

    c_t = π_prox/π_beh  (detached; optionally capped)      r_t = π_θ/π_prox
    loss = − aggregate( c_t · min(r_t·A, clip(r_t, 1 − ε_low, 1 + ε_high)·A) )

When π_prox = π_beh the correction is exactly 1 and this is `policy_loss`. Stats carry the ESS of c
(absolute and fraction) and the ratio stats of r. `behavior_cap` truncates c like TIS (AReaL's code
offers such a cap; the paper's equation has none, so the default is no cap). `weights_BT` multiplies
in a further detached correction (e.g. MIS weights for training–inference mismatch).
"""

from __future__ import annotations

import torch

from tracerl.algorithms.losses.aggregate import aggregate, masked_mean
from tracerl.algorithms.losses.corrections import effective_sample_size
from tracerl.algorithms.losses.policy import clipped_surrogate, ratio_stats
from tracerl.algorithms.registry import register


def behavior_correction(prox_logprobs_BT: torch.Tensor, behavior_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor, *,
                        cap: float | None = None) -> torch.Tensor:
    """c_t = π_prox/π_beh on the masked tokens (detached, optionally capped), 0 elsewhere."""
    mask = mask_BT.bool()
    zeros = torch.zeros_like(prox_logprobs_BT)
    c = torch.exp(torch.where(mask, prox_logprobs_BT.detach() - behavior_logprobs_BT.detach(), zeros))
    if cap is not None:
        c = c.clamp(max=cap)
    return torch.where(mask, c, zeros)


@register("decoupled_ppo", kind="loss",
          description="AReaL decoupled PPO: (pi_prox/pi_beh) * clipped surrogate of pi_theta/pi_prox",
          source="Fu et al. 2025 (AReaL)")
def decoupled_ppo(
    logprobs_BT: torch.Tensor,
    prox_logprobs_BT: torch.Tensor,
    behavior_logprobs_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    aggregation: str = "token",
    max_len: int | None = None,
    behavior_cap: float | None = None,
    dual_clip: float | None = None,
    weights_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss to minimise and detached stats; `adv_BT` may be a per-response `adv_B`."""
    if adv_BT.dim() == 1:
        adv_BT = adv_BT.unsqueeze(1).expand_as(logprobs_BT)
    if not (logprobs_BT.shape == prox_logprobs_BT.shape == behavior_logprobs_BT.shape == adv_BT.shape == mask_BT.shape):
        raise ValueError("logprobs, prox, behavior, adv and mask must share one (B, T) shape")
    mask = mask_BT.bool()
    zeros = torch.zeros_like(logprobs_BT)
    c = behavior_correction(prox_logprobs_BT, behavior_logprobs_BT, mask_BT, cap=behavior_cap)
    log_r = torch.where(mask, logprobs_BT - prox_logprobs_BT.detach(), zeros)
    r = torch.exp(log_r)
    adv = torch.where(mask, adv_BT.detach(), zeros)
    surrogate = c * clipped_surrogate(r, adv, clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip)
    if weights_BT is not None:
        surrogate = surrogate * torch.where(mask, weights_BT.detach(), zeros)
    loss = -aggregate(surrogate, mask_BT, aggregation, max_len)
    stats = ratio_stats(r, log_r, adv, mask_BT, clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip)
    with torch.no_grad():
        stats["behavior_weight_mean"] = masked_mean(c, mask_BT)
        stats["behavior_weight_max"] = c[mask].max() if mask.any() else torch.tensor(0.0)
        stats.update({f"behavior_{k}": v for k, v in effective_sample_size(c, mask_BT).items()})
        stats["loss"] = loss.detach()
    return loss, stats

"""MOPD loss: on-policy distillation from a teacher on the student's own samples.

Source: NVIDIA Nemotron-Cascade 2 (multi-domain on-policy distillation). The ideal
objective is the negative reverse KL  J = E_{y∼π_θ} Σ_t [log π_T(y_t) − log π_θ(y_t)].  Its policy
gradient uses the dense advantage A_t = stopgrad(log π_T − log π_train) on sampled tokens; the
implemented loss weights each token by the train/inference ratio ρ_t = π_train/π_inf and keeps only
tokens with ρ_t ∈ [0.5, 2.0] (together with the valid-token mask):

    loss = − aggregate(ρ_t · A_t  over tokens with mask and low ≤ ρ_t ≤ high)

ρ_t carries the gradient (∇ρ = ρ·∇log π_train), so on-policy (ρ = 1) the gradient is
−A_t·∇log π_θ, the reverse-KL policy gradient. Dropped tokens leave the denominator too.
"""

from __future__ import annotations

import torch

from tracerl.algorithms.losses.aggregate import aggregate, masked_mean
from tracerl.algorithms.registry import register


@register("mopd_loss", kind="loss",
          description="on-policy distillation loss: ratio-weighted teacher advantage, tokens kept only for ratio in [0.5, 2]",
          source="NVIDIA Nemotron-Cascade 2 (MOPD)")
def mopd_loss(
    logprobs_BT: torch.Tensor,
    inference_logprobs_BT: torch.Tensor,
    teacher_logprobs_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    ratio_low: float = 0.5,
    ratio_high: float = 2.0,
    aggregation: str = "token",
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss to minimise and stats (reverse-KL estimate, kept fraction)."""
    mask = mask_BT.bool()
    zeros = torch.zeros_like(logprobs_BT)
    log_ratio = torch.where(mask, logprobs_BT - inference_logprobs_BT.detach(), zeros)
    ratio = torch.exp(log_ratio)
    keep = mask & (ratio.detach() >= ratio_low) & (ratio.detach() <= ratio_high)
    adv = torch.where(mask, (teacher_logprobs_BT - logprobs_BT).detach(), zeros)
    loss = -aggregate(ratio * adv, keep, aggregation, max_len)
    with torch.no_grad():
        stats = {
            "reverse_kl": masked_mean(-adv, mask_BT),
            "kept_frac": keep.sum() / mask.sum().clamp_min(1),
            "loss": loss.detach(),
        }
    return loss, stats

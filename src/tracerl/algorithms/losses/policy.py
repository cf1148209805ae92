"""PPO-style clipped policy loss with asymmetric clipping (clip-higher) and optional dual clip.

Per token, with ρ = π_θ/π_old = exp(logprobs − old_logprobs) and advantage A:

    s = min(ρ·A, clip(ρ, 1 − ε_low, 1 + ε_high)·A)         clipped surrogate
    s = max(s, c·A)             where A < 0, if dual_clip=c  (Ye et al. 2020, dual-clip PPO, c > 1)
    loss = − aggregate(s, mask)                               (see losses.aggregate)

Sources: Schulman et al. 2017 (PPO); Yu et al. 2025 (DAPO: ε_low=0.2, ε_high=0.28, clip-higher,
token-level loss); Ye et al. 2020 (dual clip). Returned loss is the value to *minimise*.

Stats (detached): `clip_frac_low` is the fraction of selected tokens where the lower bound is active
(ρ < 1 − ε_low with A < 0: the gradient is cut), `clip_frac_high` the same for the upper bound
(ρ > 1 + ε_high with A > 0); `approx_kl` is the k3 estimate of KL(π_old‖π_θ), mean of (ρ − 1) − log ρ;
ratio quantiles q10/q50/q90 and min/max over selected tokens.

Optional `weights_BT` multiplies each token's surrogate by a detached importance weight (TIS/MIS
corrections from `losses.corrections`); it is not part of the PPO paper.
"""

from __future__ import annotations

import torch

from tracerl.algorithms.losses.aggregate import aggregate, masked_mean, masked_quantiles
from tracerl.algorithms.registry import register


def clipped_surrogate(
    ratio_BT: torch.Tensor, adv_BT: torch.Tensor, *, clip_low: float, clip_high: float, dual_clip: float | None = None
) -> torch.Tensor:
    """The per-token clipped surrogate s (to maximise)."""
    unclipped = ratio_BT * adv_BT
    clipped = ratio_BT.clamp(1.0 - clip_low, 1.0 + clip_high) * adv_BT
    s = torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (Ye et al. use 3), got {dual_clip}")
        s = torch.where(adv_BT < 0, torch.maximum(s, dual_clip * adv_BT), s)
    return s


def ratio_stats(
    ratio_BT: torch.Tensor, log_ratio_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor, *,
    clip_low: float, clip_high: float, dual_clip: float | None = None, prefix: str = "",
) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        r, lr, a = ratio_BT.detach(), log_ratio_BT.detach(), adv_BT.detach()
        low = ((r < 1.0 - clip_low) & (a < 0)).to(r.dtype)
        high = ((r > 1.0 + clip_high) & (a > 0)).to(r.dtype)
        q10, q50, q90 = masked_quantiles(r, mask_BT, (0.1, 0.5, 0.9))
        sel = r[mask_BT.bool()]
        stats = {
            "clip_frac_low": masked_mean(low, mask_BT),
            "clip_frac_high": masked_mean(high, mask_BT),
            "approx_kl": masked_mean(torch.expm1(lr) - lr, mask_BT),
            "ratio_mean": masked_mean(r, mask_BT),
            "ratio_q10": q10,
            "ratio_q50": q50,
            "ratio_q90": q90,
            "ratio_min": sel.min() if sel.numel() else torch.tensor(float("nan")),
            "ratio_max": sel.max() if sel.numel() else torch.tensor(float("nan")),
            "tokens": mask_BT.detach().to(torch.float32).sum(),
        }
        if dual_clip is not None:
            stats["dual_clip_frac"] = masked_mean(((a < 0) & (r * a < dual_clip * a)).to(r.dtype), mask_BT)
    return {prefix + k: v for k, v in stats.items()}


@register(
    "policy_loss",
    kind="loss",
    description="clipped PPO surrogate with asymmetric clip (clip-higher), optional dual clip, 3 aggregations",
    source="Schulman et al. 2017 (PPO); Yu et al. 2025 (DAPO clip-higher); Ye et al. 2020 (dual clip)",
)
def policy_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    aggregation: str = "token",
    max_len: int | None = None,
    dual_clip: float | None = None,
    weights_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss to minimise (− aggregated clipped surrogate) and detached stats.

    `adv_BT` may also be a per-response `adv_B`; it is broadcast over that response's tokens.
    """
    if adv_BT.dim() == 1:
        adv_BT = adv_BT.unsqueeze(1).expand_as(logprobs_BT)
    if not (logprobs_BT.shape == old_logprobs_BT.shape == adv_BT.shape == mask_BT.shape):
        raise ValueError(
            f"shapes differ: logprobs {tuple(logprobs_BT.shape)}, old {tuple(old_logprobs_BT.shape)}, "
            f"adv {tuple(adv_BT.shape)}, mask {tuple(mask_BT.shape)}"
        )
    mask = mask_BT.bool()
    # zero the log-ratio off the mask so NaN behaviour log-probs at prompt/observation slots stay inert
    log_ratio = torch.where(mask, logprobs_BT - old_logprobs_BT.detach(), torch.zeros_like(logprobs_BT))
    ratio = torch.exp(log_ratio)
    adv = torch.where(mask, adv_BT.detach(), torch.zeros_like(adv_BT))
    surrogate = clipped_surrogate(ratio, adv, clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip)
    if weights_BT is not None:
        surrogate = surrogate * torch.where(mask, weights_BT.detach(), torch.zeros_like(weights_BT))
    loss = -aggregate(surrogate, mask_BT, aggregation, max_len)
    stats = ratio_stats(ratio, log_ratio, adv, mask_BT, clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip)
    stats["loss"] = loss.detach()
    return loss, stats

"""GSPO: the importance ratio, its clip and its weight are per sequence, not per token.

Zheng et al. 2025, "Group Sequence Policy Optimization" (Qwen team). For response i with action tokens
t ∈ y_i (the ACTION positions of its mask: prompt, tool output and template tokens are never in it),

    s_i   = exp( (1/|y_i|) · Σ_t (log π_θ(y_t) − log π_old(y_t)) )      length-normalised sequence ratio
    ℓ_i   = min(s_i·A_i, clip(s_i, 1 − ε_low, 1 + ε_high)·A_i)
    loss  = − (1/G) Σ_i ℓ_i                                              (aggregation="sequence")

so every token of a sequence gets the same gradient weight: ∇ℓ_i = s_i·A_i·(1/|y_i|)·Σ_t ∇log π_θ(y_t)
while unclipped, 0 when clipped. The paper's clip ranges are small because s_i is a geometric mean:
ε_low 3e-4, ε_high 4e-4.

`variant="token"` is GSPO-token (paper §4.3): s_{i,t} = sg[s_i]·π_θ(y_t)/sg[π_θ(y_t)] with the token's own
advantage A_{i,t}; its value equals s_i and, when A_{i,t} = A_i for every t (an outcome advantage), its
gradient equals GSPO's.

Departures: ℓ_i is written to each action token of row i and reduced by `losses.aggregate`, so
"sequence" is the paper's 1/G Σ_i, while "token" (length-weighted) and "fixed" are also available; the
advantage used at a token is `adv_BT` there (the outcome advantage broadcast, as for every critic-free
spec), not re-averaged over the row.
"""

from __future__ import annotations

import torch

from tracerl.algorithms.losses.aggregate import aggregate, masked_mean
from tracerl.algorithms.losses.policy import clipped_surrogate
from tracerl.algorithms.registry import register


def sequence_log_ratio(logprobs_BT: torch.Tensor, old_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """log s_B: the mean over each row's selected tokens of log π_θ − log π_old (0 for a row with none)."""
    sel = mask_BT > 0
    lr = torch.where(sel, logprobs_BT - old_logprobs_BT.to(logprobs_BT.dtype), torch.zeros_like(logprobs_BT))
    return lr.sum(dim=1) / sel.sum(dim=1).clamp_min(1).to(lr.dtype)


@register(
    "gspo_loss",
    kind="loss",
    description="sequence-level importance ratio (length-normalised), clipped per sequence; GSPO-token variant",
    source="Zheng et al. 2025 (GSPO, Group Sequence Policy Optimization)",
)
def gspo_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    aggregation: str = "sequence",
    max_len: int | None = None,
    variant: str = "sequence",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO's loss to minimise and its stats: sequence clip fractions, sequence-ratio mean/min/max, k3 KL."""
    if variant not in ("sequence", "token"):
        raise ValueError(f"variant must be 'sequence' or 'token', got {variant!r}")
    log_s_B = sequence_log_ratio(logprobs_BT, old_logprobs_BT, mask_BT)
    if variant == "sequence":
        log_s_BT = log_s_B[:, None].expand_as(logprobs_BT)
    else:  # sg[s_i] · π_θ(y_t) / sg[π_θ(y_t)]: the value of s_i, the gradient of the token's own log-prob
        lp = torch.where(mask_BT > 0, logprobs_BT, torch.zeros_like(logprobs_BT))
        log_s_BT = log_s_B.detach()[:, None] + lp - lp.detach()
    s_BT = torch.exp(log_s_BT)
    loss = -aggregate(clipped_surrogate(s_BT, adv_BT, clip_low=clip_low, clip_high=clip_high), mask_BT,
                      aggregation, max_len)
    with torch.no_grad():
        rows = (mask_BT > 0).any(dim=1)
        s, a = log_s_B.detach().exp()[rows], (adv_BT.detach() * (mask_BT > 0)).sum(1)[rows]
        n = max(int(rows.sum()), 1)
        tok_lr = torch.where(mask_BT > 0, logprobs_BT.detach() - old_logprobs_BT.to(logprobs_BT.dtype),
                             torch.zeros_like(logprobs_BT))
        nan = torch.tensor(float("nan"))
        stats = {
            "clip_frac_low": ((s < 1 - clip_low) & (a < 0)).sum() / n,
            "clip_frac_high": ((s > 1 + clip_high) & (a > 0)).sum() / n,
            "seq_ratio_mean": s.mean() if s.numel() else nan,
            "seq_ratio_min": s.min() if s.numel() else nan,
            "seq_ratio_max": s.max() if s.numel() else nan,
            "approx_kl": masked_mean(torch.expm1(tok_lr) - tok_lr, mask_BT),
            "tokens": (mask_BT > 0).sum().to(torch.float32),
        }
    return loss, stats

"""Covariance-targeted entropy control: Clip-Cov and KL-Cov.

Source: Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models". Entropy falls when tokens whose log-probability and advantage co-vary
positively dominate the update. Over the N selected tokens of the batch:

    Cov_t = (log π_θ(y_t) − mean log π_θ) · (A_t − mean A)

Clip-Cov picks ⌊r·N⌋ tokens at random among those with ω_low ≤ Cov_t ≤ ω_high and removes their
gradient; KL-Cov picks the ⌊k·N⌋ tokens of largest Cov_t and adds β·|log π_θ − log π_old| to their
loss. The rest of the surrogate is the unclipped ρ·A of the paper's formulation (ρ = π_θ/π_old); set
`clip_low`/`clip_high` to also apply PPO clipping (a combination, not the paper's equation).
Paper defaults: r = 2e-4, ω_low = 1, ω_high = 5; k = 2e-3, β = 1. With few tokens ⌊r·N⌋ can be 0,
which makes the loss the plain surrogate; stats report how many tokens were affected.
"""

from __future__ import annotations

import torch

from tracerl.algorithms.losses.aggregate import aggregate, masked_mean
from tracerl.algorithms.losses.policy import clipped_surrogate
from tracerl.algorithms.registry import register


def token_covariance(logprobs_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Detached per-token centred product Cov_t over the selected tokens; 0 off the mask."""
    with torch.no_grad():
        lp, a = logprobs_BT.detach(), adv_BT.detach()
        mask = mask_BT.bool()
        lp0 = torch.where(mask, lp, torch.zeros_like(lp))
        a0 = torch.where(mask, a, torch.zeros_like(a))
        cov = (lp0 - masked_mean(lp0, mask_BT)) * (a0 - masked_mean(a0, mask_BT))
        return torch.where(mask, cov, torch.zeros_like(cov))


def clip_cov_selection(
    logprobs_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor, *, clip_ratio: float, cov_low: float,
    cov_high: float, generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Boolean (B, T): ⌊clip_ratio·N⌋ tokens drawn at random among those with cov_low ≤ Cov ≤ cov_high."""
    mask = mask_BT.bool()
    cov = token_covariance(logprobs_BT, adv_BT, mask)
    candidates = (mask & (cov >= cov_low) & (cov <= cov_high)).flatten().nonzero().flatten()
    n_pick = min(int(clip_ratio * int(mask.sum())), candidates.numel())
    pick = candidates[torch.randperm(candidates.numel(), generator=generator)[:n_pick].to(candidates.device)]
    out = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
    out[pick] = True
    return out.view_as(mask)


def kl_cov_selection(logprobs_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor, *, k: float) -> torch.Tensor:
    """Boolean (B, T): the ⌊k·N⌋ selected tokens of largest Cov."""
    mask = mask_BT.bool()
    cov = token_covariance(logprobs_BT, adv_BT, mask)
    n_pick = min(int(k * int(mask.sum())), int(mask.sum()))
    flat = torch.where(mask, cov, torch.full_like(cov, float("-inf"))).flatten()
    out = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
    if n_pick:
        out[torch.topk(flat, n_pick).indices] = True
    return out.view_as(mask)


def _prepare(logprobs_BT, old_logprobs_BT, adv_BT, mask_BT):
    if adv_BT.dim() == 1:
        adv_BT = adv_BT.unsqueeze(1).expand_as(logprobs_BT)
    mask = mask_BT.bool()
    zeros = torch.zeros_like(logprobs_BT)
    log_r = torch.where(mask, logprobs_BT - old_logprobs_BT.detach(), zeros)
    adv = torch.where(mask, adv_BT.detach(), zeros)
    return mask, log_r, adv


def _weighted(surrogate, weights_BT, mask):
    if weights_BT is None:
        return surrogate
    return surrogate * torch.where(mask, weights_BT.detach(), torch.zeros_like(surrogate))


def _surrogate(ratio, adv, clip_low, clip_high):
    if clip_low is None and clip_high is None:
        return ratio * adv
    return clipped_surrogate(ratio, adv, clip_low=clip_low if clip_low is not None else 1.0,  # ratio >= 0: no lower clip
                             clip_high=clip_high if clip_high is not None else float("inf"))


@register("clip_cov", kind="loss",
          description="Clip-Cov: detach the gradient of a random fraction of tokens with covariance in [w_low, w_high]",
          source="Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs")
def clip_cov(
    logprobs_BT: torch.Tensor, old_logprobs_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor, *,
    clip_ratio: float = 2e-4, cov_low: float = 1.0, cov_high: float = 5.0, generator: torch.Generator | None = None,
    clip_low: float | None = None, clip_high: float | None = None, aggregation: str = "token", max_len: int | None = None,
    weights_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss to minimise and stats (`cov_affected_frac`, `cov_mean`); `weights_BT` multiplies each token's
    surrogate by a detached correction (TIS / MIS, or the decoupled behaviour weight π_prox/π_beh)."""
    mask, log_r, adv = _prepare(logprobs_BT, old_logprobs_BT, adv_BT, mask_BT)
    detach = clip_cov_selection(logprobs_BT, adv, mask, clip_ratio=clip_ratio, cov_low=cov_low, cov_high=cov_high,
                                generator=generator)
    n, n_pick = int(mask.sum()), int(detach.sum())
    cov = token_covariance(logprobs_BT, adv, mask)
    ratio = torch.exp(log_r)
    ratio = torch.where(detach, ratio.detach(), ratio)
    loss = -aggregate(_weighted(_surrogate(ratio, adv, clip_low, clip_high), weights_BT, mask), mask_BT, aggregation,
                      max_len)
    stats = {"cov_affected_frac": torch.tensor(n_pick / max(n, 1)), "cov_mean": masked_mean(cov, mask_BT),
             "loss": loss.detach()}
    return loss, stats


@register("kl_cov", kind="loss",
          description="KL-Cov: add beta*|log pi - log pi_old| on the top-k fraction of tokens by covariance",
          source="Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs")
def kl_cov(
    logprobs_BT: torch.Tensor, old_logprobs_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor, *,
    k: float = 2e-3, coef: float = 1.0, clip_low: float | None = None, clip_high: float | None = None,
    aggregation: str = "token", max_len: int | None = None, weights_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss to minimise and stats (`cov_affected_frac`, `cov_mean`); `weights_BT` as in `clip_cov`."""
    mask, log_r, adv = _prepare(logprobs_BT, old_logprobs_BT, adv_BT, mask_BT)
    penalised = kl_cov_selection(logprobs_BT, adv, mask, k=k)
    n, n_pick = int(mask.sum()), int(penalised.sum())
    cov = token_covariance(logprobs_BT, adv, mask)
    surrogate = _surrogate(torch.exp(log_r), adv, clip_low, clip_high)
    surrogate = surrogate - coef * torch.where(penalised, log_r.abs(), torch.zeros_like(log_r))
    loss = -aggregate(_weighted(surrogate, weights_BT, mask), mask_BT, aggregation, max_len)
    stats = {"cov_affected_frac": torch.tensor(n_pick / max(n, 1)), "cov_mean": masked_mean(cov, mask_BT),
             "loss": loss.detach()}
    return loss, stats

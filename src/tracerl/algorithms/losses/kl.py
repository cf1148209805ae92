"""KL estimators against a reference policy, from samples of the current policy (Schulman 2020).

With tokens sampled from π_θ and log r = log π_ref − log π_θ:

    k1 = −log r                 unbiased, high variance, can be negative
    k2 = ½ (log r)²             biased, low variance, ≥ 0 (its gradient is the true KL gradient on-policy)
    k3 = (r − 1) − log r        unbiased, low variance, ≥ 0 (GRPO's KL term)

Source: J. Schulman, "Approximating KL Divergence" (2020 blog note); Shao et al. 2024 use k3 in GRPO.
Each estimator returns the per-token tensor; `kl_loss` aggregates one into a penalty with stats.
Masked positions are 0 so a NaN log-prob off the action mask cannot leak in.
"""

from __future__ import annotations

import torch

from tracerl.algorithms.losses.aggregate import aggregate, masked_mean
from tracerl.algorithms.registry import register


def _log_r(logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor | None) -> torch.Tensor:
    log_r = ref_logprobs_BT.detach() - logprobs_BT
    if mask_BT is not None:
        log_r = torch.where(mask_BT.bool(), log_r, torch.zeros_like(log_r))
    return log_r


@register("k1", kind="kl", description="KL estimator k1 = log pi - log pi_ref (unbiased, high variance)",
          source="Schulman 2020, Approximating KL Divergence")
def k1(logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token k1 estimate of KL(π_θ‖π_ref)."""
    return -_log_r(logprobs_BT, ref_logprobs_BT, mask_BT)


@register("k2", kind="kl", description="KL estimator k2 = (log pi - log pi_ref)^2 / 2 (biased, low variance)",
          source="Schulman 2020, Approximating KL Divergence")
def k2(logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token k2 estimate of KL(π_θ‖π_ref)."""
    return 0.5 * _log_r(logprobs_BT, ref_logprobs_BT, mask_BT).pow(2)


@register("k3", kind="kl", description="KL estimator k3 = (r - 1) - log r, r = pi_ref/pi (unbiased, >= 0)",
          source="Schulman 2020, Approximating KL Divergence; Shao et al. 2024 (GRPO KL term)")
def k3(logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ‖π_ref)."""
    log_r = _log_r(logprobs_BT, ref_logprobs_BT, mask_BT)
    return torch.expm1(log_r) - log_r


ESTIMATORS = {"k1": k1, "k2": k2, "k3": k3}


@register("kl_loss", kind="loss", description="aggregated KL penalty to a reference with a chosen estimator (k1/k2/k3)",
          source="Schulman 2020; Shao et al. 2024 (GRPO uses k3, coefficient beta)")
def kl_loss(
    logprobs_BT: torch.Tensor,
    ref_logprobs_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    estimator: str = "k3",
    coef: float = 1.0,
    aggregation: str = "token",
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """coef · aggregate(k_estimator) and stats with all three estimates (detached)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    per_token = ESTIMATORS[estimator](logprobs_BT, ref_logprobs_BT, mask_BT)
    loss = coef * aggregate(per_token, mask_BT, aggregation, max_len)
    with torch.no_grad():
        stats = {f"kl_{name}": masked_mean(fn(logprobs_BT.detach(), ref_logprobs_BT, mask_BT), mask_BT)
                 for name, fn in ESTIMATORS.items()}
        stats["kl_loss"] = loss.detach()
    return loss, stats

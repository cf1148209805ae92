"""Training–inference mismatch corrections and the effective sample size of importance weights.

The rollout engine's log-probabilities (π_rollout / π_beh) differ from the trainer's recomputation
(π_train) because of kernels, precision and stale weights.

    tis:  w = min(π_train/π_rollout, cap)                    truncated importance sampling
    mis:  w = π_train/π_rollout  if low ≤ ratio ≤ high,  else the token is dropped (mask 0)

Sources: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(TIS); NVIDIA Nemotron 3 Nano/Super (masked importance sampling). The weights are
detached; pass them as `weights_BT` to `policy_loss` / `decoupled_ppo` (and the MIS mask as the mask).

ESS of weights w over the selected tokens: (Σw)² / Σw², reported absolute and as a fraction of the
token count (Kong 1992; 1.0 means all weights equal).
"""

from __future__ import annotations

import torch

from tracerl.algorithms.registry import register


def effective_sample_size(weights_BT: torch.Tensor, mask_BT: torch.Tensor) -> dict[str, torch.Tensor]:
    """{"ess": (Σw)²/Σw², "ess_frac": ess / n} over selected tokens (0 and 0 for an empty selection)."""
    with torch.no_grad():
        w = weights_BT.detach()[mask_BT.bool()].double()
        n = w.numel()
        if n == 0 or float((w * w).sum()) == 0.0:
            return {"ess": torch.tensor(0.0), "ess_frac": torch.tensor(0.0)}
        ess = w.sum() ** 2 / (w * w).sum()
        return {"ess": ess.float(), "ess_frac": (ess / n).float()}


def _ratio(train_logprobs_BT: torch.Tensor, rollout_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    mask = mask_BT.bool()
    log_ratio = torch.where(mask, train_logprobs_BT.detach() - rollout_logprobs_BT.detach(), torch.zeros_like(train_logprobs_BT))
    return torch.exp(log_ratio)


@register("tis", kind="correction",
          description="truncated importance sampling: weight min(pi_train/pi_rollout, cap) per token",
          source="Yao et al. 2025 (TIS for training-inference mismatch)")
def tis(
    train_logprobs_BT: torch.Tensor, rollout_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor, *, cap: float = 2.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(weights_BT, stats): detached truncated ratios, 0 off the mask."""
    ratio = _ratio(train_logprobs_BT, rollout_logprobs_BT, mask_BT)
    w = torch.where(mask_BT.bool(), ratio.clamp(max=cap), torch.zeros_like(ratio))
    sel = mask_BT.bool()
    stats = {"tis_truncated_frac": ((ratio > cap) & sel).sum() / sel.sum().clamp_min(1), **effective_sample_size(w, mask_BT)}
    return w, stats


@register("mis", kind="correction",
          description="masked importance sampling: drop tokens whose pi_train/pi_rollout leaves [low, high]",
          source="NVIDIA Nemotron 3 Nano/Super (masked importance sampling)")
def mis(
    train_logprobs_BT: torch.Tensor, rollout_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor, *,
    low: float = 0.5, high: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """(weights_BT, kept_mask_BT, stats): the ratio where it lies in [low, high], and the narrowed mask."""
    if not 0 < low <= 1 <= high:
        raise ValueError(f"mis needs 0 < low <= 1 <= high, got low={low}, high={high}")
    ratio = _ratio(train_logprobs_BT, rollout_logprobs_BT, mask_BT)
    sel = mask_BT.bool()
    keep = sel & (ratio >= low) & (ratio <= high)
    w = torch.where(keep, ratio, torch.zeros_like(ratio))
    stats = {"mis_dropped_frac": (sel & ~keep).sum() / sel.sum().clamp_min(1), **effective_sample_size(w, keep)}
    return w, keep.to(mask_BT.dtype), stats

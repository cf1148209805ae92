"""The three loss aggregations; each one is a different objective, not a detail.

    token     Σ_{i,t} m·ℓ / Σ_{i,t} m              token-global (DAPO; Skywork MAGIC)
    sequence  mean_i ( Σ_t m·ℓ / Σ_t m )            per-response mean, then mean (original GRPO)
    fixed     Σ_{i,t} m·ℓ / (B · L_max)             fixed constant denominator (Dr.GRPO)

Responses with no selected token are left out of the `sequence` mean (they have no per-response
mean); an empty batch aggregates to 0 with a gradient path kept. `fixed` needs `max_len`: it is a
configured cap, and defaulting it to the padded width would silently change its meaning.
"""

from __future__ import annotations

import torch


AGGREGATIONS = ("token", "sequence", "fixed")


def aggregate(loss_BT: torch.Tensor, mask_BT: torch.Tensor, aggregation: str = "token", max_len: int | None = None) -> torch.Tensor:
    """Reduce a per-token loss to a scalar under `aggregation`; masked-out tokens contribute nothing."""
    if loss_BT.dim() != 2 or loss_BT.shape != mask_BT.shape:
        raise ValueError(f"loss_BT {tuple(loss_BT.shape)} and mask_BT {tuple(mask_BT.shape)} must be equal 2-D shapes")
    m = mask_BT.to(loss_BT.dtype)
    # where() rather than multiply so a NaN/inf at a masked position cannot leak into the sum or gradient
    masked = torch.where(m > 0, loss_BT, torch.zeros_like(loss_BT)) * m
    if aggregation == "token":
        return masked.sum() / m.sum().clamp_min(1)
    if aggregation == "sequence":
        per_seq_tokens = m.sum(dim=1)
        per_seq = masked.sum(dim=1) / per_seq_tokens.clamp_min(1)
        has_tokens = (per_seq_tokens > 0).to(loss_BT.dtype)
        return (per_seq * has_tokens).sum() / has_tokens.sum().clamp_min(1)
    if aggregation == "fixed":
        if max_len is None or max_len <= 0:
            raise ValueError("aggregation='fixed' (Dr.GRPO) needs max_len, the configured response-length cap L_max")
        return masked.sum() / (loss_BT.shape[0] * max_len)
    raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")


def masked_mean(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Detached-friendly token mean over the mask (0 for an empty mask)."""
    m = mask_BT.to(x_BT.dtype)
    return torch.where(m > 0, x_BT, torch.zeros_like(x_BT)).mul(m).sum() / m.sum().clamp_min(1)


def masked_quantiles(x_BT: torch.Tensor, mask_BT: torch.Tensor, qs: tuple[float, ...]) -> list[torch.Tensor]:
    """Linear-interpolation quantiles of the selected values (NaN when none). Sort-based, because
    torch.quantile refuses inputs above 2**24 elements and a large batch has more tokens than that."""
    vals = x_BT.detach()[mask_BT.bool()].float().sort().values
    n = vals.numel()
    if n == 0:
        return [torch.tensor(float("nan")) for _ in qs]
    out = []
    for q in qs:
        pos = q * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        out.append(vals[lo] + (vals[hi] - vals[lo]) * (pos - lo))
    return out

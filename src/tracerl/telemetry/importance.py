"""Policy movement and importance-weight health over a batch of N action tokens.

    w_t   = π_θ(a_t|s_t) / π_beh(a_t|s_t) = exp(log π_θ − log π_beh)      importance weight
    ESS   = (Σ_t w_t)² / Σ_t w_t²                                       effective sample size
    ESS/N                                                               fraction of eligible tokens
    KL̂   = 1/N Σ_t (w_t − 1) − log w_t                                 k3 estimate of KL(π_beh‖π_θ)

ESS equals N when every weight is equal and falls towards 1 as one token dominates. Clip fractions
follow the algorithm library's definition (`algorithms.losses.policy.ratio_stats`): a token counts
as clipped low when ρ < 1 − ε_low *and* A < 0, high when ρ > 1 + ε_high *and* A > 0 — the cases
where the clip actually cuts the gradient. `active_only=False` counts any ratio outside the band.
"""

from __future__ import annotations

import math

import numpy as np

QUANTILES = (0.1, 0.5, 0.9, 0.99)


def ess(weights: np.ndarray) -> float:
    """(Σw)² / Σw²; NaN for an empty batch or all-zero weights."""
    w = np.asarray(weights, dtype=np.float64)
    sq = float(np.sum(w * w))
    return float(np.sum(w)) ** 2 / sq if sq > 0 else math.nan


def ess_fraction(weights: np.ndarray) -> float:
    """ESS divided by the number of eligible tokens, in (0, 1]."""
    w = np.asarray(weights, dtype=np.float64)
    return ess(w) / w.size if w.size else math.nan


def clip_fractions(ratio: np.ndarray, advantages: np.ndarray | None, *, clip_low: float, clip_high: float,
                   active_only: bool = True) -> tuple[float, float]:
    """(fraction clipped below the band, fraction clipped above) over the given tokens."""
    r = np.asarray(ratio, dtype=np.float64)
    if r.size == 0:
        return math.nan, math.nan
    low, high = r < 1.0 - clip_low, r > 1.0 + clip_high
    if active_only:
        if advantages is None:
            raise ValueError("active clip fractions need advantages; pass active_only=False for band-only counts")
        a = np.asarray(advantages, dtype=np.float64)
        low, high = low & (a < 0), high & (a > 0)
    return float(low.mean()), float(high.mean())


def k3_kl(log_ratio: np.ndarray) -> float:
    """Mean of (e^x − 1) − x over log-ratios x = log p − log q of tokens sampled from q: KL(q‖p) ≥ 0."""
    x = np.asarray(log_ratio, dtype=np.float64)
    return float(np.mean(np.expm1(x) - x)) if x.size else math.nan


def quantiles(values: np.ndarray, prefix: str, qs: tuple[float, ...] = QUANTILES, suffix: str = "") -> dict[str, float]:
    """{prefix}p10{suffix}, …, {prefix}max{suffix}; linear interpolation (numpy's default)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {}
    out = {f"{prefix}p{round(q * 100)}{suffix}": float(np.quantile(v, q)) for q in qs}
    out[f"{prefix}max{suffix}"] = float(v.max())
    return out


def importance_metrics(logprobs: np.ndarray, behavior_logprobs: np.ndarray) -> dict[str, float]:
    """ESS, weight quantiles and behavior KL from per-token current and behavior log-probs."""
    log_w = np.asarray(logprobs, dtype=np.float64) - np.asarray(behavior_logprobs, dtype=np.float64)
    if log_w.size == 0:
        return {}
    w = np.exp(log_w)
    out = {"is/ess": ess(w), "is/ess_frac": ess_fraction(w), "is/eligible_tokens": float(w.size),
           "is/weight_min": float(w.min()), "policy/kl_behavior": k3_kl(log_w)}
    out.update(quantiles(w, "is/weight_"))
    return out

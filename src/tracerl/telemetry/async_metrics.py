"""Metrics of asynchronous RL (`async/*`): staleness, importance weights of the three policies, queue and idle time.

The three policies of decoupled PPO (AReaL): the *behavior* policy sampled the tokens (each token's
recorded version, `async/behavior_version_*`); the *proximal* policy is the learner at the start of
the update (`async/proximal_version`), whose log-probs the learner recomputes; the *current* policy
is the one being optimised (its ratio to the proximal one is what `policy/clip_*` report). The
importance weight π_prox/π_behavior corrects for the staleness: `async/iw/*` are its quantiles over
the trained action tokens, `async/ess` and `async/ess_frac` its effective sample size (Σw)²/Σw², and
`async/kl_behavior` the KL from the behavior policy to the learner at the start of the update,
KL(π_behavior ‖ π_prox) ≈ mean over the sampled tokens of (w − 1) − log w (the k3 estimator, unbiased for tokens
drawn from π_behavior): what staleness alone moved the policy. `policy/approx_kl` is the other half, the
update's own drift from π_prox.

Staleness is reported per trajectory (its oldest token's lag) and stratified by episode length in
thirds of the token budget, because rejecting stale rollouts removes long episodes first (a long
episode is more likely to be overtaken by a weight update), which biases training towards short ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from tracerl.contract import Trajectory
from tracerl.telemetry.importance import k3_kl, quantiles

LENGTH_BANDS = ("short", "mid", "long")


def length_band(length: int, max_tokens: int) -> str:
    """Thirds of the episode budget: short < 1/3, mid < 2/3, long otherwise."""
    return LENGTH_BANDS[min(2, 3 * length // max(1, max_tokens))]


def staleness_distribution(lags: Sequence[int], lengths: Sequence[int], *, max_tokens: int, eta: int,
                           prefix: str = "async/staleness") -> dict[str, float]:
    """Per-trajectory lag: mean, max, the fraction at each lag 0..η, and the mean per length band."""
    if not lags:
        return {}
    lag = np.asarray(lags, dtype=np.float64)
    out = {f"{prefix}/mean": float(lag.mean()), f"{prefix}/max": float(lag.max())}
    for k in range(eta + 1):
        out[f"{prefix}/frac_lag{k}"] = float((lag == k).mean())
    bands = np.asarray([length_band(n, max_tokens) for n in lengths])
    for b in LENGTH_BANDS:
        sel = bands == b
        if sel.any():
            out[f"{prefix}/by_length/{b}/mean"] = float(lag[sel].mean())
            out[f"{prefix}/by_length/{b}/count"] = float(sel.sum())
    return out


def rejected_by_length(trajs: Sequence[Trajectory], *, max_tokens: int) -> dict[str, float]:
    out = {f"async/rejected_stale/by_length/{b}": 0.0 for b in LENGTH_BANDS}
    for t in trajs:
        out[f"async/rejected_stale/by_length/{length_band(len(t), max_tokens)}"] += 1
    return out


def importance_weights(prox_BT: torch.Tensor, behavior_BT: torch.Tensor, mask_BT: torch.Tensor) -> dict[str, float]:
    """Quantiles and ESS (absolute and as a fraction of the tokens) of π_prox/π_behavior on the mask."""
    sel = mask_BT > 0
    w = torch.exp(prox_BT[sel].double() - behavior_BT[sel].double()).numpy()
    if w.size == 0:
        return {}
    ess = float(w.sum() ** 2 / max((w * w).sum(), 1e-300))
    log_w = (prox_BT[sel].double() - behavior_BT[sel].double()).numpy()
    return {**quantiles(w, "async/iw/", qs=(0.01, 0.05, 0.5, 0.95, 0.99)), "async/iw/mean": float(w.mean()),
            "async/ess": ess, "async/ess_frac": ess / w.size, "async/iw_tokens": float(w.size),
            "async/kl_behavior": k3_kl(log_w)}


def version_metrics(version_BT: torch.Tensor, mask_BT: torch.Tensor, learner_version: int) -> dict[str, float]:
    """The behavior versions of the trained tokens against the proximal (learner) version."""
    v = version_BT[mask_BT > 0]
    if v.numel() == 0:
        return {"async/proximal_version": float(learner_version)}
    return {"async/proximal_version": float(learner_version), "async/behavior_version_min": float(v.min()),
            "async/behavior_version_mean": float(v.double().mean())}


def multi_version_fraction(trajs: Sequence[Trajectory]) -> float:
    """Fraction of trajectories whose action tokens come from more than one policy version (partial rollouts)."""
    if not trajs:
        return 0.0
    return float(np.mean([len({v for v in t.policy_versions if v >= 0}) > 1 for t in trajs]))

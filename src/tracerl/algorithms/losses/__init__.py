"""Policy, value, KL, distillation and entropy-control losses; this file re-exports the public names.

Every loss returns `(loss_to_minimise, stats)` with detached stats; per-token KL estimators and
importance corrections return tensors (plus stats) to be combined by the caller.
"""

from tracerl.algorithms.losses.aggregate import AGGREGATIONS, aggregate
from tracerl.algorithms.losses.corrections import effective_sample_size, mis, tis
from tracerl.algorithms.losses.covariance import clip_cov, clip_cov_selection, kl_cov, kl_cov_selection, token_covariance
from tracerl.algorithms.losses.decoupled import decoupled_ppo
from tracerl.algorithms.losses.distill import mopd_loss
from tracerl.algorithms.losses.gspo import gspo_loss
from tracerl.algorithms.losses.kl import k1, k2, k3, kl_loss
from tracerl.algorithms.losses.policy import clipped_surrogate, policy_loss
from tracerl.algorithms.losses.value import positive_nll, value_loss

__all__ = [
    "AGGREGATIONS", "aggregate", "clip_cov", "clip_cov_selection", "clipped_surrogate", "decoupled_ppo", "effective_sample_size", "gspo_loss", "k1", "k2",
    "k3", "kl_cov", "kl_cov_selection", "kl_loss", "mis", "mopd_loss", "policy_loss", "positive_nll", "tis", "token_covariance", "value_loss",
]

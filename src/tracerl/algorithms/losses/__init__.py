"""Policy, value, KL, distillation and entropy-control losses; this file re-exports the public names.

Every loss returns `(loss_to_minimise, stats)` with detached stats.
"""

from tracerl.algorithms.losses.aggregate import AGGREGATIONS, aggregate
from tracerl.algorithms.losses.kl import k1, k2, k3, kl_loss
from tracerl.algorithms.losses.policy import clipped_surrogate, policy_loss

__all__ = ["AGGREGATIONS", "aggregate", "clipped_surrogate", "k1", "k2", "k3", "kl_loss", "policy_loss"]

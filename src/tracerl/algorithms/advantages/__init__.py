"""Advantage estimators, one per module; this file re-exports the public names.

Outcome-level estimators take `rewards_B` and return `adv_B` (broadcast over a response's action
tokens by `losses.policy_loss`); token-level ones take `_BT` tensors and return `adv_BT`.
"""

from tracerl.algorithms.advantages.gae import gae, gae_decoupled, length_adaptive_lambda, vapo_gae
from tracerl.algorithms.advantages.grpo import dr_grpo, grpo, grpo_with_stats
from tracerl.algorithms.advantages.rloo import rloo

__all__ = ["dr_grpo", "gae", "gae_decoupled", "grpo", "grpo_with_stats", "length_adaptive_lambda", "rloo", "vapo_gae"]

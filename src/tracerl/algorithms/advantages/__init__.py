"""Advantage estimators, one per module; this file re-exports the public names.

Outcome-level estimators take `rewards_B` and return `adv_B` (broadcast over a response's action
tokens by `losses.policy_loss`); token-level ones take `_BT` tensors and return `adv_BT`.
"""

from tracerl.algorithms.advantages.gae import gae, gae_decoupled, length_adaptive_lambda, vapo_gae
from tracerl.algorithms.advantages.gigpo import gigpo
from tracerl.algorithms.advantages.grpo import dr_grpo, grpo, grpo_with_stats
from tracerl.algorithms.advantages.mopd import mopd
from tracerl.algorithms.advantages.prime import prime
from tracerl.algorithms.advantages.reinforce_pp import reinforce_pp, reinforce_pp_baseline
from tracerl.algorithms.advantages.rloo import rloo

__all__ = [
    "dr_grpo", "gae", "gae_decoupled", "gigpo", "grpo", "grpo_with_stats", "length_adaptive_lambda", "mopd", "prime",
    "reinforce_pp", "reinforce_pp_baseline", "rloo", "vapo_gae",
]

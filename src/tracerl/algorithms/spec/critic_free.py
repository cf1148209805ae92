"""Critic-free algorithms: one outcome reward per trajectory, a baseline from the group or the batch.

Each class names its estimator (a registered function of `tracerl.algorithms.advantages`) and the
defaults its paper uses; every other part (clip, KL, entropy, corrections, shaping, selection) is
the shared `Algorithm` fields, so `rl.algorithm: {name: rloo, kl: {coef: 0.01}}` is RLOO with a KL term.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from tracerl.algorithms.advantages import dr_grpo, grpo, reinforce_pp, reinforce_pp_baseline, rloo
from tracerl.algorithms.spec.base import Algorithm
from tracerl.algorithms.spec.terms import Overlong


class GRPO(Algorithm):
    """GRPO (Shao et al. 2024, DeepSeekMath): A = (R − group mean) / (group std + eps)."""

    name: Literal["grpo"] = "grpo"
    scale: Literal["std", "none"] = "std"
    """Divide by the group's population std (GRPO) or only centre (Dr.GRPO's advantage)."""

    def outcome_advantage(self, rewards_B: torch.Tensor, group_B: torch.Tensor) -> torch.Tensor:
        return grpo(rewards_B, group_B, scale=self.scale)


class DrGRPO(Algorithm):
    """Dr.GRPO (Liu et al. 2025, Understanding R1-Zero-Like Training): centred advantage, no std division,
    and the fixed B·L_max loss denominator, removing GRPO's length and difficulty biases."""

    name: Literal["dr_grpo"] = "dr_grpo"
    aggregation: Literal["token", "sequence", "fixed"] = "fixed"
    """Loss aggregation; the paper's unbiased objective is `fixed` (B·L_max with L_max = env.max_tokens)."""

    def outcome_advantage(self, rewards_B: torch.Tensor, group_B: torch.Tensor) -> torch.Tensor:
        return dr_grpo(rewards_B, group_B)


class RLOO(Algorithm):
    """RLOO (Ahmadian et al. 2024): A = R − mean of the other members of the group."""

    name: Literal["rloo"] = "rloo"

    def outcome_advantage(self, rewards_B: torch.Tensor, group_B: torch.Tensor) -> torch.Tensor:
        return rloo(rewards_B, group_B)


class ReinforcePP(Algorithm):
    """REINFORCE++ (Hu 2025): rewards normalised by the mean and std of the whole batch, no groups."""

    name: Literal["reinforce_pp"] = "reinforce_pp"

    def outcome_advantage(self, rewards_B: torch.Tensor, group_B: torch.Tensor) -> torch.Tensor:
        return reinforce_pp(rewards_B)


class ReinforcePPBaseline(Algorithm):
    """REINFORCE++-baseline (Hu 2025): subtract the group mean, divide by the batch std."""

    name: Literal["reinforce_pp_baseline"] = "reinforce_pp_baseline"

    def outcome_advantage(self, rewards_B: torch.Tensor, group_B: torch.Tensor) -> torch.Tensor:
        return reinforce_pp_baseline(rewards_B, group_B)


class DAPO(GRPO):
    """DAPO (Yu et al. 2025): GRPO's advantage with clip-higher (ε_high 0.28), dynamic sampling,
    the token-global loss and the soft overlong penalty; pair with `rl.truncation: mask` for its
    overlong filtering. Scaled down here: L_cache defaults to 32 tokens against the paper's 4096."""

    name: Literal["dapo"] = "dapo"  # type: ignore[assignment]
    clip_high: float = Field(0.28, ge=0)
    """Upper clip ε_high (DAPO: 0.28 against ε_low 0.2)."""
    dynamic_sampling: bool = True
    """Keep only groups with reward variance, drawing more until the batch is full (DAPO's dynamic sampling)."""
    overlong: Overlong | None = Field(default_factory=Overlong)
    """Soft overlong punishment (DAPO §3.4); null turns it off."""

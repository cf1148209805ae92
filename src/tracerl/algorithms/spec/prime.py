"""PRIME (Cui et al. 2025, Process Reinforcement through Implicit Rewards) from a `Batch`.

The implicit PRM π_φ (`roles.prm`, a copy of the policy at the start of RL) is trained online first,
on the same rollouts: its sequence logit is r_φ(y) = β · Σ_t log(π_φ(y_t)/π_ref(y_t)) over the action
tokens, fitted with binary cross-entropy to the outcome label 1[R > label_threshold]. Then, with the
updated π_φ, token rewards β·log(π_φ/π_ref) give the process advantage and the outcome reward the
outcome advantage, each with its own leave-one-out baseline (`algorithms.advantages.prime`); the
policy loss is the shared clipped surrogate. `prm/accuracy` is measured on each minibatch before the
PRM's step on it, so on rollouts it has not been trained on (ties at logit 0 count one half).

Departure: the PRM update's minibatches are the policy's (`rl.minibatches`); the paper's PRM has its
own batch size. The reference is the frozen policy at the start of the stage (as for the KL term).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from tracerl.algorithms.advantages import prime
from tracerl.algorithms.batch import Batch
from tracerl.algorithms.spec.base import Algorithm, StepContext


class PRIME(Algorithm):
    """PRIME: online implicit PRM, leave-one-out process and outcome advantages."""

    name: Literal["prime"] = "prime"
    beta: float = Field(0.05, gt=0)
    """β of the implicit reward β·log(π_φ/π_ref) (the paper: 0.05)."""
    gamma: float = Field(1.0, gt=0, le=1)
    """Discount of the process returns per action token (the paper: 1)."""
    label_threshold: float = 0.0
    """A rollout whose reward exceeds this is labelled correct for the PRM's cross-entropy."""

    def roles(self) -> set[str]:
        return super().roles() | {"reference", "prm"}

    def needs(self) -> set[str]:
        return super().needs() | {"reference", "prm"}

    def trained_roles(self) -> dict[str, str]:
        return {"prm": "before"}

    def role_loss(self, role: str, mb: Batch, out: torch.Tensor, scores: dict[str, torch.Tensor],
                  rewards_B: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if role != "prm":
            return super().role_loss(role, mb, out, scores, rewards_B, ctx)
        mask = mb.mask_BT
        logit_B = self.beta * ((out - scores["reference"]) * mask).sum(dim=1)
        label_B = (rewards_B > self.label_threshold).to(logit_B.dtype)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit_B, label_B)
        with torch.no_grad():
            pred = torch.where(logit_B > 0, 1.0, torch.where(logit_B < 0, 0.0, 0.5))
            acc = 1 - (pred - label_B).abs()
        return loss, {"loss": loss.detach(), "accuracy": acc.mean(), "positive_frac": label_B.mean()}

    def advantages(self, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, dict[str, float]]:
        keep = batch.baseline_B
        adv = torch.zeros_like(batch.mask_BT)
        if not keep.any():
            return adv, {}
        a, s = prime(scores["prm"][keep], scores["reference"][keep], rewards_B[keep], batch.group_B[keep],
                     batch.mask_BT[keep], beta=self.beta, gamma=self.gamma)
        adv[keep] = a.to(adv.dtype)
        sel = batch.mask_BT > 0
        stats = {f"prime/{k}": float(v) for k, v in s.items()}
        if sel.any():
            stats |= {"adv/mean": float(adv[sel].mean()), "adv/std": float(adv[sel].std(unbiased=False)),
                      "adv/abs_mean": float(adv[sel].abs().mean())}
        return adv, stats

"""PRIME (Cui et al. 2025, Process Reinforcement through Implicit Rewards) from a `Batch`.

The implicit PRM π_φ (`roles.prm`, a copy of the policy at the start of RL) is trained online first,
on the same rollouts: its sequence logit is r_φ(y) = β · Σ_t log(π_φ(y_t)/π_ref(y_t)) over the action
tokens, fitted with binary cross-entropy to the outcome label 1[R > label_threshold]. Then, with the
updated π_φ, token rewards β·log(π_φ/π_ref) give the process advantage and the outcome reward the
outcome advantage, each with its own leave-one-out baseline (`algorithms.advantages.prime`); the
policy loss is the shared clipped surrogate.

Metrics (`prm_ranking`), over every row of the step, each scored before the PRM's step on its minibatch
(so on rollouts it has not been trained on); ties count one half. At the start π_φ = π_ref, every logit
is 0, and each metric is exactly 0.5. `prm/accuracy` is the share of rows whose logit has the label's
sign; with few positives it rewards a PRM that calls everything wrong (all logits < 0 scores the
negative share), and the logit has no bias term, so a uniform drift of log π_φ − log π_ref moves it
without any change in ranking. Hence also `prm/balanced_accuracy` (mean of the per-class accuracies)
and `prm/auc` (share of positive-negative pairs the logit orders right) and `prm/group_auc` (pairs
within one group — the comparison the leave-one-out advantages use); these are logged only on steps
with both labels. Chance is 0.5 for all three whatever the label balance.

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
        return loss, {"loss": loss.detach(), "row/logit": logit_B.detach(), "row/label": label_B, "row/group": mb.group_B}

    def role_summary(self, role: str, rows: dict[str, torch.Tensor]) -> dict[str, float]:
        if role != "prm":
            return super().role_summary(role, rows)
        return prm_ranking(rows["logit"], rows["label"], rows["group"])

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


def prm_ranking(logit_B: torch.Tensor, label_B: torch.Tensor, group_B: torch.Tensor) -> dict[str, float]:
    """How well the PRM's sequence logits separate the outcome labels (1 correct, 0 not), ties one half:
    `accuracy` (sign vs label), `positive_frac`, and — only with both labels present — `balanced_accuracy`
    (mean of the two classes' accuracies), `auc` (positive-negative pairs ordered right) and `group_auc`
    (such pairs within one group; absent when no group has both labels)."""
    pred = torch.where(logit_B > 0, 1.0, torch.where(logit_B < 0, 0.0, 0.5))
    hit = 1 - (pred - label_B).abs()
    out = {"accuracy": float(hit.mean()), "positive_frac": float(label_B.mean())}
    pos, neg = label_B > 0.5, label_B <= 0.5
    if not (pos.any() and neg.any()):
        return out
    out["balanced_accuracy"] = float((hit[pos].mean() + hit[neg].mean()) / 2)
    d = logit_B[:, None] - logit_B[None, :]  # [i, j]: positive i against negative j
    win = (d > 0).double() + 0.5 * (d == 0).double()
    pairs = pos[:, None] & neg[None, :]
    out["auc"] = float(win[pairs].mean())
    same = pairs & (group_B[:, None] == group_B[None, :])
    if same.any():
        out["group_auc"] = float(win[same].mean())
    return out

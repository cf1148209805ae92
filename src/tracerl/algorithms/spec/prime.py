"""PRIME (Cui et al. 2025, Process Reinforcement through Implicit Rewards) from a `Batch`.

The implicit PRM π_φ (`roles.prm`, a copy of the policy at the start of RL) is trained online first,
on the same rollouts: its sequence logit is r_φ(y) = β · Σ_t log(π_φ(y_t)/π_ref(y_t)) over the action
tokens, fitted with binary cross-entropy to the outcome label 1[R > label_threshold]. Then, with the
updated π_φ, token rewards β·log(π_φ/π_ref) give the process advantage and the outcome reward the
outcome advantage, each with its own leave-one-out baseline (`algorithms.advantages.prime`); the
policy loss is the shared clipped surrogate.

Metrics (`prm_ranking`): every eligible rollout of the step (not only the ones it trains on) is
scored by the PRM as it enters the step, before any update on these rollouts; ties count one half. At
the start π_φ = π_ref, every logit is 0 and each metric exactly 0.5. `prm/accuracy` is the share of
rollouts whose logit has the label's sign: with few positives a PRM that calls everything wrong
scores the negative share, and since the logit has no bias term a uniform drift of log π_φ − log π_ref
moves it with no change in ranking. Hence also `prm/balanced_accuracy` (mean of the two labels'
accuracies), `prm/auc` (share of positive-negative pairs ordered right) and `prm/group_auc` (such
pairs within one group: the comparison the leave-one-out advantages make), logged on steps with both
labels; chance is 0.5 for these whatever the label balance.

The PRM trains only on the groups with both labels (`prm_groups: mixed`, as the paper's online prompt
filter) with the two labels weighted equally (`prm_balance`). Without them, on text_world (~10 %
successes) the cross-entropy mostly pushes log π_φ down on failed rollouts, and once the policy's
successes thin out the PRM scores every failure above zero and ranks failures above successes
(docs/algorithms.md, "PRIME's PRM on text_world").

Departure: the PRM update's minibatches are the policy's (`rl.minibatches`); the paper's PRM has its
own batch size, and the paper filters the policy's prompts too (here only the PRM's). The reference
is the frozen policy at the start of the stage (as for the KL term).
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
    prm_groups: Literal["mixed", "all"] = "mixed"
    """Rollouts the PRM trains on: `mixed`, only the groups with both a correct and an incorrect rollout
    (the paper's online prompt filter, which keeps prompts of accuracy in [0.2, 0.8]); `all`, every one."""
    prm_balance: bool = True
    """Weight the two labels equally in the PRM's cross-entropy (each minibatch with both: the mean of the
    positives' loss and of the negatives'); false: the plain mean over rollouts."""

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
        bce = torch.nn.functional.binary_cross_entropy_with_logits(logit_B, label_B, reduction="none")
        pos = label_B > 0.5
        if self.prm_balance and pos.any() and (~pos).any():
            loss = (bce[pos].mean() + bce[~pos].mean()) / 2
        else:
            loss = bce.mean()
        return loss, {"loss": loss.detach(), "row/logit": logit_B.detach(), "row/label": label_B, "row/group": mb.group_B}

    def role_rows(self, role: str, batch: Batch, rewards_B: torch.Tensor) -> torch.Tensor | None:
        if role != "prm" or self.prm_groups == "all":
            return super().role_rows(role, batch, rewards_B)
        return mixed_groups(rewards_B > self.label_threshold, batch.group_B, batch.weight_B > 0)

    def summarises(self, role: str) -> bool:
        return role == "prm"

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


TIE = 1e-5
"""Logits (and logit differences) this close to 0 are ties: π_φ = π_ref scored on differently padded
minibatches differs by float rounding (~1e-7 per token), which must not count as a prediction."""


def mixed_groups(label_B: torch.Tensor, group_B: torch.Tensor, valid_B: torch.Tensor) -> torch.Tensor:
    """Rows (bool) of the groups whose valid rows hold both labels."""
    n = int(group_B.max()) + 1 if group_B.numel() else 0
    pos = torch.zeros(n, dtype=torch.long).index_add_(0, group_B, (label_B & valid_B).long())
    neg = torch.zeros(n, dtype=torch.long).index_add_(0, group_B, (~label_B & valid_B).long())
    return ((pos > 0) & (neg > 0))[group_B] & valid_B


def prm_ranking(logit_B: torch.Tensor, label_B: torch.Tensor, group_B: torch.Tensor) -> dict[str, float]:
    """How well the PRM's sequence logits separate the outcome labels (1 correct, 0 not), ties (within `TIE`)
    one half: `accuracy` (sign vs label), `positive_frac`, and — only with both labels present — `balanced_accuracy`
    (mean of the two classes' accuracies), `auc` (positive-negative pairs ordered right) and `group_auc`
    (such pairs within one group; absent when no group has both labels)."""
    pred = torch.where(logit_B > TIE, 1.0, torch.where(logit_B < -TIE, 0.0, 0.5))
    hit = 1 - (pred - label_B).abs()
    out = {"accuracy": float(hit.mean()), "positive_frac": float(label_B.mean())}
    pos, neg = label_B > 0.5, label_B <= 0.5
    if not (pos.any() and neg.any()):
        return out
    out["balanced_accuracy"] = float((hit[pos].mean() + hit[neg].mean()) / 2)
    d = logit_B[:, None] - logit_B[None, :]  # [i, j]: positive i against negative j
    win = (d > TIE).double() + 0.5 * (d.abs() <= TIE).double()
    pairs = pos[:, None] & neg[None, :]
    out["auc"] = float(win[pairs].mean())
    same = pairs & (group_B[:, None] == group_B[None, :])
    if same.any():
        out["group_auc"] = float(win[same].mean())
    return out

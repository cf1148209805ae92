"""MOPD: on-policy distillation from frozen teachers (Nemotron-Cascade 2; Nemotron 3 Ultra's MOPD).

The student samples; each teacher in `roles.teachers` scores the student's tokens. The dense token
advantage is stopgrad(log π_teacher − log π_behavior) (`algorithms.advantages.mopd`; in this
synchronous trainer the behaviour policy is the proximal one, scored under the same distribution),
optionally plus `outcome_coef` × a GRPO outcome advantage broadcast to the tokens. The loss is
`losses.mopd_loss`: −ρ·A over the tokens whose train/inference ratio ρ lies in [ratio_low,
ratio_high] (the paper's [0.5, 2]), others dropped from the sum and the denominator.

Departure: with several teachers every trajectory is distilled towards their mean log-prob; the
reports route each task to its domain's teacher. Metrics: `mopd/reverse_kl/<teacher>`, the token mean
of log π_student − log π_teacher on the sampled tokens (a reverse-KL sample).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator

from tracerl.algorithms.advantages import grpo, mopd
from tracerl.algorithms.batch import Batch
from tracerl.algorithms.losses import kl_loss, mopd_loss
from tracerl.algorithms.losses.aggregate import masked_mean
from tracerl.algorithms.spec.base import Algorithm, PolicyOutput, StepContext

TEACHER = "teacher/"


class MOPD(Algorithm):
    """On-policy distillation: teacher log-probs as the dense advantage, the [0.5, 2] ratio band."""

    name: Literal["mopd"] = "mopd"
    ratio_low: float = Field(0.5, gt=0, le=1)
    """Lowest train/inference ratio whose token is kept (the paper: 0.5)."""
    ratio_high: float = Field(2.0, ge=1)
    """Highest kept ratio (the paper: 2)."""
    outcome_coef: float = Field(0.0, ge=0)
    """Weight of the GRPO outcome advantage added to the teacher advantage; 0 is pure distillation."""

    @model_validator(mode="after")
    def _own_loss(self) -> MOPD:
        unused = sorted(self.model_fields_set & {"clip_low", "clip_high", "dual_clip", "clip_cov", "kl_cov", "decoupled",
                                                 "correction", "nll", "entropy"})
        if unused:
            raise ValueError(f"mopd trains with its ratio-band distillation loss, so {', '.join(unused)} would have no "
                             "effect; remove them (ratio_low, ratio_high, outcome_coef, kl and aggregation apply)")
        return self

    def roles(self) -> set[str]:
        return super().roles() | {"teachers"}

    def needs(self) -> set[str]:
        return super().needs() | {"teachers"}

    @property
    def every_row(self) -> bool:
        return True  # a teacher advantage is dense: every row moves the loss

    def advantages(self, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, dict[str, float]]:
        mask = batch.mask_BT
        teachers = sorted(k for k in scores if k.startswith(TEACHER))
        if not teachers:
            raise ValueError("mopd needs teacher log-probs but the trainer holds no teacher role")
        stats = {f"mopd/reverse_kl/{k[len(TEACHER):]}": float(masked_mean(batch.behavior_BT - scores[k], mask))
                 for k in teachers}
        adv = torch.stack([mopd(scores[k], batch.behavior_BT, mask) for k in teachers]).mean(dim=0)
        if self.outcome_coef > 0:
            keep, out_B = batch.baseline_B, torch.zeros_like(rewards_B)
            if keep.any():
                out_B[keep] = grpo(rewards_B[keep], batch.group_B[keep]).to(out_B.dtype)
            adv = adv + self.outcome_coef * out_B[:, None] * mask
        sel = mask > 0
        if sel.any():
            stats |= {"adv/mean": float(adv[sel].mean()), "adv/std": float(adv[sel].std(unbiased=False)),
                      "adv/abs_mean": float(adv[sel].abs().mean())}
        return adv, stats

    def loss(self, mb: Batch, out: PolicyOutput, scores: dict[str, torch.Tensor], adv_BT: torch.Tensor,
             rewards_B: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # mopd_loss takes its advantage as teacher − current log-prob; handing it current + adv_BT as the
        # "teacher" makes that advantage exactly adv_BT (fixed from the behaviour policy, outcome term included)
        target = out.logprobs_BT.detach() + adv_BT
        loss, s = mopd_loss(out.logprobs_BT, mb.behavior_BT, target, mb.mask_BT, ratio_low=self.ratio_low,
                            ratio_high=self.ratio_high, aggregation=self.aggregation, max_len=ctx.max_tokens)
        stats = {"pg_loss": loss.detach(), "mopd_kept_frac": s["kept_frac"]}
        if self.kl.coef > 0:
            kl, s = kl_loss(out.full_logprobs_BT, scores["reference"], mb.mask_BT, estimator=self.kl.estimator,
                            coef=self.kl.coef, aggregation=self.aggregation, max_len=ctx.max_tokens)
            loss, stats = loss + kl, {**stats, **s}
        return loss, stats

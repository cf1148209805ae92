"""MOPD: on-policy distillation from frozen teachers (Nemotron-Cascade 2; Nemotron 3 Ultra's MOPD).

The student samples; each teacher in `roles.teachers` scores the student's tokens. The dense token
advantage is stopgrad(log π_teacher − log π_behavior) (`algorithms.advantages.mopd`; in this
synchronous trainer the behaviour policy is the proximal one, scored under the same distribution),
optionally plus `outcome_coef` × a GRPO outcome advantage broadcast to the tokens. The loss is
`losses.mopd_loss`: −ρ·A over the tokens whose train/inference ratio ρ lies in [ratio_low,
ratio_high] (the paper's [0.5, 2]), others dropped from the sum and the denominator.

`support: K` adds a distribution-matching term (GKD with β = 0, Agarwal et al. 2024, "On-Policy
Distillation of Language Models: Learning from Self-Generated Mistakes", on the student's own samples):
at every kept token the forward KL Σ_k p̂_T(k)·(log p̂_T(k) − log π_θ(k)) over the teacher's K most likely
tokens, p̂_T its top-K distribution renormalised, times `support_coef`. The sampled token's advantage
says only that this token was worse or better than the teacher would have it; the support tells the
student which tokens the teacher would have written, at every position, from one sample.

`after_error: w` weighs every term at the tokens after each trajectory's first failed action
(`Batch.failed_BS`: the observation reported an error) by w; 0 distils the error-free path only (the
failed action itself included). On text_world the student's states after its first error held 73 % of
the action tokens and 95 % of the forward KL, and a step on the whole batch raised the first turn's KL
while lowering the rest: plain distillation fell from 0.235 to 0.010 held-out in 2 updates; with w = 0
at lr 1.5e-4 it did not fall, though it stalled below GRPO (docs/distillation.md).

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
from tracerl.algorithms.losses.aggregate import aggregate, masked_mean
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
    reverse_coef: float = Field(1.0, ge=0)
    """Weight of the teacher advantage on the sampled token (the reverse KL; the paper's loss). 0 with
    `support: K` trains the top-K forward KL alone (mass-covering: the student keeps the teacher's rarer actions)."""
    support: int = Field(0, ge=0, le=4096)
    """K > 0: also match the teacher's top-K distribution at every kept token (the forward KL above); 0: the
    paper's loss on the sampled token only. Costs a `[B, T, K]` tensor per teacher."""
    support_coef: float = Field(1.0, ge=0)
    """Weight of the top-K forward KL term (with `support` > 0)."""
    after_error: float = Field(1.0, ge=0, le=1)
    """Weight of the tokens after each trajectory's first failed action (an observation whose tool status is
    not ok), in every term of the loss: 1 trains every token (the paper's loss), 0 the error-free path only."""

    @model_validator(mode="after")
    def _own_loss(self) -> MOPD:
        unused = sorted(self.model_fields_set & {"clip_low", "clip_high", "dual_clip", "clip_cov", "kl_cov", "decoupled",
                                                 "correction", "nll", "entropy"})
        if unused:
            raise ValueError(f"mopd trains with its ratio-band distillation loss, so {', '.join(unused)} would have no "
                             "effect; remove them (ratio_low, ratio_high, outcome_coef, reverse_coef, support, after_error, kl and aggregation apply)")
        return self

    @model_validator(mode="after")
    def _support_coef_needs_support(self) -> MOPD:
        if "support_coef" in self.model_fields_set and not self.support:
            raise ValueError("support_coef weights the top-K term, which support: 0 turns off; set support: K (e.g. 16) "
                             "or remove support_coef")
        if self.reverse_coef == 0 and not self.support and self.outcome_coef == 0:
            raise ValueError("mopd with reverse_coef 0, support 0 and outcome_coef 0 has nothing to train; set support: K "
                             "(e.g. 16) for the forward KL, or reverse_coef > 0")
        return self

    def roles(self) -> set[str]:
        return super().roles() | {"teachers"}

    @property
    def teacher_support(self) -> int:
        return self.support

    def support_ids(self, scores: dict[str, torch.Tensor]) -> torch.Tensor | None:
        if not self.support:
            return None
        return torch.cat([scores[f"{k}@support_ids"] for k in _teachers(scores)], dim=-1)

    def needs(self) -> set[str]:
        return super().needs() | {"teachers"}

    @property
    def every_row(self) -> bool:
        return True  # a teacher advantage is dense: every row moves the loss

    @property
    def weighs_rows(self) -> bool:
        return False  # the ratio band's loss counts the tokens it keeps

    def advantages(self, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, dict[str, float]]:
        weight = self._token_weight(batch)
        mask = batch.mask_BT * (weight > 0)
        teachers = _teachers(scores)
        if not teachers:
            raise ValueError("mopd needs teacher log-probs but the trainer holds no teacher role")
        stats = {f"mopd/reverse_kl/{k[len(TEACHER):]}": float(masked_mean(batch.behavior_BT - scores[k], mask))
                 for k in teachers}
        for k in teachers if self.support else ():  # how much of each teacher's distribution its top K hold
            mass = torch.logsumexp(scores[f"{k}@support_lp"], dim=-1).exp()
            stats[f"mopd/support_mass/{k[len(TEACHER):]}"] = float(masked_mean(mass, mask))
        adv = self.reverse_coef * torch.stack([mopd(scores[k], batch.behavior_BT, mask) for k in teachers]).mean(dim=0)
        if self.outcome_coef > 0:
            keep, out_B = batch.baseline_B, torch.zeros_like(rewards_B)
            if keep.any():
                out_B[keep] = grpo(rewards_B[keep], batch.group_B[keep]).to(out_B.dtype)
            adv = adv + self.outcome_coef * out_B[:, None] * mask
        if self.after_error < 1:  # weigh the tokens past a trajectory's first failure; report their share
            adv = adv * weight
            after = (batch.mask_BT > 0) & (weight != batch.mask_BT)
            stats["mopd/after_error_frac"] = float(after.sum() / (batch.mask_BT > 0).sum().clamp_min(1))
        sel = mask > 0
        if sel.any():
            stats |= {"adv/mean": float(adv[sel].mean()), "adv/std": float(adv[sel].std(unbiased=False)),
                      "adv/abs_mean": float(adv[sel].abs().mean())}
        return adv, stats

    def loss(self, mb: Batch, out: PolicyOutput, scores: dict[str, torch.Tensor], adv_BT: torch.Tensor,
             rewards_B: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # mopd_loss takes its advantage as teacher − current log-prob; handing it current + adv_BT as the
        # "teacher" makes that advantage exactly adv_BT (fixed from the behaviour policy, outcome term included)
        weight = self._token_weight(mb)
        target, mask = out.logprobs_BT.detach() + adv_BT, mb.mask_BT * (weight > 0)
        loss, s = mopd_loss(out.logprobs_BT, mb.behavior_BT, target, mask, ratio_low=self.ratio_low,
                            ratio_high=self.ratio_high, aggregation=self.aggregation, max_len=ctx.max_tokens)
        stats = {"pg_loss": loss.detach(), "mopd_kept_frac": s["kept_frac"]}
        if self.support:
            kl = self._support_kl(mb, weight, out, scores, ctx)
            loss, stats = loss + self.support_coef * kl, {**stats, "mopd_support_kl": kl.detach()}
        if self.kl.coef > 0:
            kl, s = kl_loss(out.full_logprobs_BT, scores["reference"], mask, estimator=self.kl.estimator,
                            coef=self.kl.coef, aggregation=self.aggregation, max_len=ctx.max_tokens)
            loss, stats = loss + kl, {**stats, **s}
        return loss, stats

    def _token_weight(self, b: Batch) -> torch.Tensor:
        """`mask_BT`, times `after_error` at the tokens of the turns after each row's first failed one."""
        if self.after_error == 1:
            return b.mask_BT
        S = b.failed_BS.shape[1]
        turn_S = torch.arange(S, device=b.failed_BS.device).expand_as(b.failed_BS)
        first_B = torch.where(b.failed_BS, turn_S, torch.full_like(turn_S, S)).min(dim=1).values
        after = b.turn_BT > first_B[:, None]
        return b.mask_BT * torch.where(after, torch.full_like(b.mask_BT, self.after_error), torch.ones_like(b.mask_BT))

    def _support_kl(self, mb: Batch, weight_BT: torch.Tensor, out: PolicyOutput, scores: dict[str, torch.Tensor],
                    ctx: StepContext) -> torch.Tensor:
        """Mean over teachers of the aggregated top-K forward KL, each token weighted, over the tokens the
        ratio band keeps."""
        mask = weight_BT > 0
        ratio = torch.exp(out.logprobs_BT.detach() - mb.behavior_BT)
        keep = mask & (ratio >= self.ratio_low) & (ratio <= self.ratio_high)
        terms, at = [], 0
        for k in _teachers(scores):
            t_lp = scores[f"{k}@support_lp"]
            K = t_lp.shape[-1]
            q = t_lp - torch.logsumexp(t_lp, dim=-1, keepdim=True)  # the teacher's top K, renormalised
            s_lp = out.support_logprobs_BTK[..., at:at + K]
            kl = (q.exp() * (q - s_lp)).sum(dim=-1)
            terms.append(aggregate(torch.where(keep, kl * weight_BT, torch.zeros_like(kl)), keep, self.aggregation,
                                   ctx.max_tokens))
            at += K
        return torch.stack(terms).mean()


def _teachers(scores: dict[str, torch.Tensor]) -> list[str]:
    """The teachers' sampled-token score names (`teacher/<name>`), without their support tensors."""
    return sorted(k for k in scores if k.startswith(TEACHER) and "@" not in k)

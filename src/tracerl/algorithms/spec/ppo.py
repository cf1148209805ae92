"""PPO with a learned critic, VAPO style (Yue et al. 2025, VAPO; Seed1.5-Thinking's PPO).

The critic (`roles.critic`, a value head on a copy of the policy) gives V at every action token (the
value of the context the token is sampled from). The episode reward is the token reward of the last
action token of the episode, all others 0; tool observations between turns are skipped by GAE, so
turn boundaries do not break the recursion. Decoupled GAE: the policy advantage uses λ_policy (or
VAPO's length-adaptive λ = 1 − 1/(α·l), l the episode's action tokens), the value target λ_value = 1
(Monte-Carlo returns, unbiased for the critic). The critic is trained with the clipped value loss on
each minibatch after the advantages are computed from its old values; during
`roles.critic.pretrain_steps` only the critic trains (VAPO's value pretraining). The policy loss is the
shared clipped surrogate with token-level aggregation, clip-higher and the optional positive-example
NLL (`nll`).

Departures: a truncated episode is not bootstrapped — its return is the reward the truncation policy
gives it, as for the critic-free estimators; no separate advantage whitening.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from tracerl.algorithms.advantages import gae, gae_decoupled, vapo_gae
from tracerl.algorithms.advantages.gae import length_adaptive_lambda
from tracerl.algorithms.batch import Batch
from tracerl.algorithms.losses import value_loss
from tracerl.algorithms.losses.aggregate import masked_mean
from tracerl.algorithms.spec.base import Algorithm, StepContext


def terminal_token_rewards(mask_BT: torch.Tensor, rewards_B: torch.Tensor) -> torch.Tensor:
    """`[B, T]`: each row's reward on its last masked token, 0 elsewhere (and for rows with no token)."""
    T = mask_BT.shape[1]
    pos = torch.arange(T).expand_as(mask_BT)
    last = torch.where(mask_BT > 0, pos, torch.full_like(pos, -1)).max(dim=1).values
    out = torch.zeros(mask_BT.shape, dtype=rewards_B.dtype)
    has = last >= 0
    out[has.nonzero().flatten(), last[has]] = rewards_B[has]
    return out


class PPO(Algorithm):
    """PPO with a critic and decoupled, optionally length-adaptive GAE (VAPO)."""

    name: Literal["ppo"] = "ppo"
    gamma: float = Field(1.0, gt=0, le=1)
    """Discount per action token (VAPO: 1)."""
    lam_policy: float = Field(0.95, ge=0, le=1)
    """GAE λ of the policy advantage (Seed1.5-Thinking: 0.95); ignored when `alpha` is set."""
    lam_value: float = Field(1.0, ge=0, le=1)
    """GAE λ of the critic's target (VAPO: 1, the Monte-Carlo return)."""
    alpha: float | None = Field(None, gt=0)
    """Length-adaptive policy λ = 1 − 1/(α·l) with l the episode's action tokens (VAPO: α = 0.05); null for
    the fixed `lam_policy`."""
    value_clip: float | None = Field(0.2, gt=0)
    """Value clipping ε_v around the critic's values before the update; null for the plain squared error."""

    def roles(self) -> set[str]:
        return super().roles() | {"critic"}

    def needs(self) -> set[str]:
        return super().needs() | {"values"}

    def trained_roles(self) -> dict[str, str]:
        return {"critic": "after"}

    def _lam(self, mask_BT: torch.Tensor) -> float | torch.Tensor:
        if self.alpha is None:
            return self.lam_policy
        return length_adaptive_lambda(mask_BT.sum(dim=1), alpha=self.alpha)

    def advantages(self, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, dict[str, float]]:
        mask, values = batch.mask_BT, scores["values"]
        r = terminal_token_rewards(mask, rewards_B.to(values.dtype))
        if self.alpha is None:
            adv, returns = gae_decoupled(r, values, mask, gamma=self.gamma, lam_policy=self.lam_policy,
                                         lam_value=self.lam_value)
        else:
            adv, returns = vapo_gae(r, values, mask, alpha=self.alpha, gamma=self.gamma, lam_value=self.lam_value)
        lam = self._lam(mask)
        sel = mask > 0
        if not sel.any():
            return adv, {}
        var_t = float(returns[sel].var(unbiased=False))
        ev = 1 - float((returns[sel] - values[sel]).var(unbiased=False)) / var_t if var_t > 1e-8 else float("nan")
        stats = {"adv/mean": float(adv[sel].mean()), "adv/std": float(adv[sel].std(unbiased=False)),
                 "adv/abs_mean": float(adv[sel].abs().mean()), "critic/value_mean": float(values[sel].mean()),
                 "critic/return_mean": float(returns[sel].mean()), "critic/explained_variance_before": ev}
        if torch.is_tensor(lam):
            stats["critic/lam_policy_mean"] = float(lam[mask.sum(dim=1) > 0].mean())
        return adv, stats

    def role_loss(self, role: str, mb: Batch, out: torch.Tensor, scores: dict[str, torch.Tensor],
                  rewards_B: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if role != "critic":
            return super().role_loss(role, mb, out, scores, rewards_B, ctx)
        mask, old = mb.mask_BT, scores["values"]
        r = terminal_token_rewards(mask, rewards_B.to(old.dtype))
        _, returns = gae(r, old, mask, gamma=self.gamma, lam=self.lam_value)  # row-wise: a minibatch suffices
        loss, s = value_loss(out, old, returns, mask, clip=self.value_clip, aggregation="token")
        return loss, {**s, "value_mean": masked_mean(out.detach(), mask)}

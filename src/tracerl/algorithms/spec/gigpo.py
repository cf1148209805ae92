"""GiGPO (Feng et al. 2025, Group-in-Group Policy Optimization for LLM Agent Training) from a `Batch`.

Each trajectory's turns are its steps; the state of turn k is `Batch.state_BS[:, k]` (dense ids of the
environment's `state_hash`, shared by the batch). Step rewards are 0 except the episode reward on the
last turn, so a step's discounted return is γ^(turns after it) · R. Within each group, turns taken in
the same state form an anchor group; the step advantage compares their returns, and

    A_{i,k} = A^E_i + ω · A^S_{i,k}          broadcast to turn k's action tokens (`turn_BT`)

Infrastructure failures (`baseline_B` False) take part in neither the episode nor the anchor groups.
Departure from the paper: state identity is exact hash equality (the paper also describes
similarity-based grouping for free-text states).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from tracerl.algorithms.advantages import gigpo
from tracerl.algorithms.advantages.gigpo import anchor_index
from tracerl.algorithms.batch import Batch
from tracerl.algorithms.spec.base import Algorithm


def step_rewards(batch: Batch, rewards_B: torch.Tensor) -> torch.Tensor:
    """`[B, S]`: each trajectory's reward on its last turn, 0 on the others and past the end."""
    turns = batch.turns_B
    out = torch.zeros(batch.state_BS.shape, dtype=rewards_B.dtype)
    has = turns > 0
    out[has.nonzero().flatten(), (turns[has] - 1)] = rewards_B[has]
    return out


def steps_to_tokens(adv_BS: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Broadcast per-turn values over each turn's action tokens (0 elsewhere and off the loss mask)."""
    turn = batch.turn_BT.clamp_min(0)
    return torch.where(batch.turn_BT >= 0, adv_BS.gather(1, turn), torch.zeros_like(batch.mask_BT)) * batch.mask_BT


class GiGPO(Algorithm):
    """GiGPO: episode-relative advantage plus ω × step-relative advantage over anchor states."""

    name: Literal["gigpo"] = "gigpo"
    omega: float = Field(1.0, ge=0)
    """Weight ω of the step-relative advantage (the paper: 1)."""
    gamma: float = Field(0.95, gt=0, le=1)
    """Discount γ per turn of the step returns (the paper: 0.95)."""
    scale: Literal["std", "none"] = "std"
    """Normalise both advantages by their group's std (`std`) or only centre them (`none`)."""

    def advantages(self, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, dict[str, float]]:
        keep = batch.baseline_B & (batch.turns_B > 0)
        adv_BS = torch.zeros(batch.state_BS.shape, dtype=rewards_B.dtype)
        if not keep.any():
            return torch.zeros_like(batch.mask_BT), {}
        sub = batch.rows(keep.nonzero().flatten())
        state, step_mask = sub.state_BS, (sub.state_BS >= 0).float()
        a, s = gigpo(step_rewards(sub, rewards_B[keep]), step_mask, state, sub.group_B,
                     omega=self.omega, gamma=self.gamma, scale=self.scale)
        adv_BS[keep, :a.shape[1]] = a.to(adv_BS.dtype)
        aidx, n = anchor_index(sub.group_B, state, step_mask)
        sizes = torch.bincount(aidx, minlength=n).float()
        adv_BT = steps_to_tokens(adv_BS, batch)
        sel = batch.mask_BT > 0
        stats = {"gigpo/anchor_groups": float(n), "gigpo/anchor_mean_size": float(sizes.mean()) if n else 0.0,
                 "gigpo/anchor_max_size": float(sizes.max()) if n else 0.0,
                 "gigpo/anchor_nonsingleton_frac": float(s["anchor_nonsingleton_frac"]),
                 "gigpo/steps_in_repeated_states": float(s["steps_in_repeated_states"])}
        if sel.any():
            stats |= {"adv/mean": float(adv_BT[sel].mean()), "adv/std": float(adv_BT[sel].std(unbiased=False)),
                      "adv/abs_mean": float(adv_BT[sel].abs().mean())}
        return adv_BT, stats

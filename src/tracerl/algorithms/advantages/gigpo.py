"""GiGPO: episode-relative plus anchor-state step-relative advantages, without extra rollouts.

Source: Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training".
For G episodes of one task (one group), with per-step rewards r and discounted returns
G_{i,t} = Σ_{u≥t} γ^{u−t} r_{i,u}:

    A^E_i   = relative(G_{i,0};  {G_{j,0} : j in the group})
    A^S_i,t = relative(G_{i,t};  {G_{j,u} : same group, s_{j,u} = s_{i,t}})      (anchor-state group)
    A_i,t   = A^E_i + ω · A^S_i,t

`relative` is GRPO's normalisation (`scale="std"`: (x − mean)/(std + eps); `"none"`: centred only;
the paper offers both). Steps are the positions with `step_mask_BS` = 1; returns skip masked-out
slots. A state that occurs once is a singleton anchor group and contributes 0, so with no repeated
state GiGPO reduces to trajectory-level GRPO (its stated lower bound). The paper's reported settings
are ω = 1 and γ = 0.95. State identity is exact equality of the given ids (e.g. the contract's
`state_hash`); the paper's similarity-based grouping for search states is not implemented here.

The output is per step; the caller broadcasts each step's advantage over that step's action tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from tracerl.algorithms.advantages.prime import discounted_suffix_sum
from tracerl.algorithms.groups import group_index, relative
from tracerl.algorithms.registry import register


def anchor_index(
    group_idx_B: torch.Tensor, state_ids_BS: torch.Tensor | Sequence[Sequence[Hashable]], step_mask_BS: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """Dense anchor-group index for every valid step (flattened, row-major), and the number of anchors."""
    mask = step_mask_BS.bool()
    if isinstance(state_ids_BS, torch.Tensor):
        keys = torch.stack([group_idx_B[:, None].expand_as(state_ids_BS), state_ids_BS.long()], dim=-1)[mask]
        if keys.numel() == 0:
            return torch.zeros(0, dtype=torch.long), 0
        _, inverse = torch.unique(keys, dim=0, return_inverse=True)
        return inverse, int(inverse.max().item()) + 1
    seen: dict[tuple[int, Hashable], int] = {}
    idx = []
    for b, row in enumerate(state_ids_BS):
        g = int(group_idx_B[b])
        for s, state in enumerate(row):
            if s < mask.shape[1] and mask[b, s]:
                idx.append(seen.setdefault((g, state), len(seen)))
    if len(idx) != int(mask.sum()):
        raise ValueError("state_ids_BS must give a state id for every valid step")
    return torch.tensor(idx, dtype=torch.long), len(seen)


@register("gigpo", kind="advantage",
          description="GiGPO: episode-relative advantage plus omega * step-relative advantage over repeated anchor states",
          source="Feng et al. 2025 (GiGPO)")
def gigpo(
    step_rewards_BS: torch.Tensor,
    step_mask_BS: torch.Tensor,
    state_ids_BS: torch.Tensor | Sequence[Sequence[Hashable]],
    group_ids_B: torch.Tensor | Sequence[Hashable],
    *,
    omega: float = 1.0,
    gamma: float = 0.95,
    scale: str = "std",
    eps: float = 1e-6,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(adv_BS, stats): per-step advantages, 0 at masked-out steps."""
    with torch.no_grad():
        mask = step_mask_BS.bool()
        rewards = step_rewards_BS.detach().to(torch.get_default_dtype() if not step_rewards_BS.is_floating_point()
                                              else step_rewards_BS.dtype)
        returns = discounted_suffix_sum(rewards, mask, gamma)
        gidx, n_groups = group_index(group_ids_B, rewards.device)
        if gidx.numel() != rewards.shape[0]:
            raise ValueError(f"{rewards.shape[0]} episodes but {gidx.numel()} group ids")
        first = mask.to(torch.long).argmax(dim=1)
        episode_return = returns.gather(1, first[:, None])[:, 0]
        adv_episode = relative(episode_return, gidx, n_groups, scale=scale, eps=eps)
        aidx, n_anchor = anchor_index(gidx, state_ids_BS, mask)
        step_adv = torch.zeros_like(returns)
        if n_anchor:
            step_adv[mask] = relative(returns[mask], aidx.to(returns.device), n_anchor, scale=scale, eps=eps)
        adv = torch.where(mask, adv_episode[:, None] + omega * step_adv, torch.zeros_like(returns))
        sizes = torch.zeros(n_anchor).index_add(0, aidx.cpu(), torch.ones(aidx.numel())) if n_anchor else torch.zeros(0)
        stats = {
            "anchor_groups": torch.tensor(float(n_anchor)),
            "anchor_nonsingleton_frac": (sizes > 1).float().mean() if n_anchor else torch.tensor(0.0),
            "steps_in_repeated_states": sizes[aidx.cpu()].gt(1).float().mean() if n_anchor else torch.tensor(0.0),
        }
    return adv, stats

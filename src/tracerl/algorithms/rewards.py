"""Reward shaping rules: DAPO soft overlong penalty, Nemotron group-relative length bonus, and
weighted checkpoint (partial-credit) rewards. Each returns a per-response tensor to add to (or form)
the reward; recording the raw components stays the verifier's job.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from tracerl.algorithms.groups import group_index, segment_all_equal, segment_mean
from tracerl.algorithms.registry import register


@register("overlong_penalty", kind="reward",
          description="DAPO soft overlong penalty: 0 up to L_max - L_cache, linear to -1 at L_max, -1 beyond",
          source="Yu et al. 2025 (DAPO, soft overlong punishment)")
def overlong_penalty(lengths_B: torch.Tensor, *, max_len: int | torch.Tensor, cache_len: int | torch.Tensor) -> torch.Tensor:
    """r_len(|y|) = 0 if |y| ≤ L_max − L_cache; (L_max − L_cache − |y|)/L_cache if ≤ L_max; −1 beyond.

    `max_len` and `cache_len` are numbers, or per-row tensors `[B]` (rows of environments with different budgets)."""
    ok = (torch.as_tensor(cache_len) > 0) & (torch.as_tensor(cache_len) <= torch.as_tensor(max_len))
    if not bool(ok.all()):
        raise ValueError(f"overlong_penalty needs 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    lengths = torch.as_tensor(lengths_B).to(torch.get_default_dtype())
    soft_start = max_len - cache_len
    ramp = (soft_start - lengths) / cache_len
    return torch.where(lengths <= soft_start, torch.zeros_like(lengths), torch.where(lengths <= max_len, ramp, -torch.ones_like(lengths)))


def _centred_shortness(lengths_B: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    """(group mean − length) / (group max − group min): > 0 for shorter than average, sums to 0 per group."""
    hi = torch.full((n,), float("-inf"), dtype=lengths_B.dtype, device=lengths_B.device).scatter_reduce(0, idx, lengths_B, "amax")
    lo = torch.full((n,), float("inf"), dtype=lengths_B.dtype, device=lengths_B.device).scatter_reduce(0, idx, lengths_B, "amin")
    spread = (hi - lo)[idx]
    w = (segment_mean(lengths_B, idx, n)[idx] - lengths_B) / spread.clamp_min(1e-12)
    return torch.where(segment_all_equal(lengths_B, idx, n)[idx], torch.zeros_like(w), w)


@register("length_bonus", kind="reward",
          description="Nemotron group-relative length control: centred bonuses for shorter reasoning and answer",
          source="NVIDIA Nemotron 3 Nano report (group-relative length control)")
def length_bonus(
    rewards_B: torch.Tensor,
    think_lengths_B: torch.Tensor,
    answer_lengths_B: torch.Tensor,
    group_ids_B: torch.Tensor | Sequence[Hashable],
    *,
    lam_think: float = 0.5,
    lam_answer: float = 0.5,
    quality_B: torch.Tensor | None = None,
    top_bonus: float = 0.5,
    quality_quantile: float = 0.8,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """R_i = R_base + λ_think·w̃_think + λ_answer·w̃_answer (+ top_bonus for the shortest high-quality response).

    Departure: the report gives the form and λ = 0.5 but not how w̃ is normalised; here w̃ is the
    group-centred shortness (mean − length)/(max − min), in [−1, 1] and summing to 0 per group. When
    `quality_B` is given, in each group the shortest response (think + answer) among those with quality
    at or above the group's `quality_quantile` gets `top_bonus`, our reading of the report's 0.5 bonus
    for shortest responses above the 80th quality percentile.
    """
    rewards = torch.as_tensor(rewards_B).to(torch.get_default_dtype())
    think = torch.as_tensor(think_lengths_B).to(rewards.device, rewards.dtype)
    answer = torch.as_tensor(answer_lengths_B).to(rewards.device, rewards.dtype)
    idx, n = group_index(group_ids_B, rewards.device)
    w_think, w_answer = _centred_shortness(think, idx, n), _centred_shortness(answer, idx, n)
    out = rewards + lam_think * w_think + lam_answer * w_answer
    bonus = torch.zeros_like(rewards)
    if quality_B is not None:
        quality = torch.as_tensor(quality_B).to(rewards.device, rewards.dtype)
        total = think + answer
        for g in range(n):
            members = (idx == g).nonzero().flatten()
            cut = torch.quantile(quality[members], quality_quantile)
            good = members[quality[members] >= cut]
            bonus[good[total[good].argmin()]] = top_bonus
    out = out + bonus
    return out, {"length_bonus_abs_mean": (out - rewards).abs().mean(), "top_bonus_count": (bonus > 0).sum().float()}


def checkpoint_reward(achieved_BK: torch.Tensor, weights_K: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Σ_k w_k · 1{check k achieved at least once}; `achieved_BK` may hold counts (repeats add nothing)."""
    weights = torch.as_tensor(weights_K, dtype=torch.get_default_dtype())
    if weights.dim() != 1 or not torch.isfinite(weights).all() or (weights < 0).any():
        raise ValueError(f"checkpoint weights must be a 1-D list of finite non-negative numbers, got {weights_K!r}")
    achieved = torch.as_tensor(achieved_BK)
    weights = weights.to(achieved.device)
    if achieved.shape[-1] != weights.numel():
        raise ValueError(f"{achieved.shape[-1]} checks per trajectory but {weights.numel()} weights")
    return (achieved > 0).to(weights.dtype) @ weights

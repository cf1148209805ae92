"""Selection rules that decide which rollouts enter an update: dynamic sampling and resample-on-correct.

They change the training distribution, so each reports exactly what it dropped.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from tracerl.algorithms.groups import as_float, group_index, segment_all_equal
from tracerl.algorithms.registry import register


@register("dynamic_sampling", kind="selection",
          description="keep only groups with non-zero reward variance; report every dropped group and its reward",
          source="Yu et al. 2025 (DAPO dynamic sampling); Skywork-OR1")
def dynamic_sampling(
    rewards_B: torch.Tensor, group_ids_B: torch.Tensor | Sequence[Hashable]
) -> tuple[torch.Tensor, dict]:
    """(keep_B, report): keep_B is False for members of all-equal groups (all correct or all wrong).

    report = {"groups", "kept_groups", "dropped_groups", "dropped": [{"group_id", "reward", "size"}, …]}.
    DAPO then oversamples replacement prompts until the batch is full; that loop belongs to the sampler.
    """
    rewards = as_float(rewards_B)
    ids = group_ids_B.tolist() if isinstance(group_ids_B, torch.Tensor) else list(group_ids_B)
    idx, n = group_index(ids, rewards.device)
    flat = segment_all_equal(rewards, idx, n)
    keep = ~flat[idx]
    first: dict[int, int] = {}
    for i, g in enumerate(idx.tolist()):
        first.setdefault(g, i)
    sizes = torch.bincount(idx, minlength=n).tolist()
    dropped = [{"group_id": ids[first[g]], "reward": float(rewards[first[g]]), "size": sizes[g]}
               for g in range(n) if bool(flat[g])]
    report = {"groups": n, "kept_groups": n - len(dropped), "dropped_groups": len(dropped), "dropped": dropped}
    return keep, report


def roc_penalty(n_tool_calls: torch.Tensor, n_tool_errors: torch.Tensor, n_answers: torch.Tensor,
                n_turns: torch.Tensor) -> torch.Tensor:
    """rStar2-Agent's selection penalty for a successful rollout: tool-error score + format score.

    tool-error = 0.5 if there is no tool call, else erroneous calls / all calls;
    format     = 1 if there is no answer tag, else min(1, (answers − 1) / turns).
    """
    calls, errors = as_float(n_tool_calls), as_float(n_tool_errors)
    answers, turns = as_float(n_answers), as_float(n_turns)
    tool = torch.where(calls > 0, errors / calls.clamp_min(1), torch.full_like(calls, 0.5))
    fmt = torch.where(answers > 0, ((answers - 1) / turns.clamp_min(1)).clamp(max=1.0), torch.ones_like(answers))
    return tool + fmt


@register("resample_on_correct", kind="selection",
          description="GRPO-RoC: from 2G rollouts keep negatives uniformly (up to half), positives inversely to penalty",
          source="Shang et al. 2025 (rStar2-Agent, GRPO-RoC)")
def resample_on_correct(
    correct_B: torch.Tensor,
    penalties_B: torch.Tensor,
    group_ids_B: torch.Tensor | Sequence[Hashable],
    *,
    group_size: int,
    smoothing: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict]:
    """(kept indices, sorted; report). Per group of oversampled rollouts, retain `group_size` of them.

    Negatives (correct = False) are drawn uniformly without replacement, at most ⌊G/2⌋ of them; the rest
    are positives drawn without replacement with probability ∝ 1/(penalty + smoothing) (see `roc_penalty`).
    If one side runs short, the other fills the group. Departure: the survey does not give the exact
    inverse-penalty weighting; `smoothing` keeps a zero penalty from taking all the mass.
    The retained sample is deliberately not an unbiased draw from the behaviour policy.
    """
    correct = torch.as_tensor(correct_B).bool().cpu()  # bookkeeping: indices and a CPU generator
    penalties = as_float(penalties_B).cpu()
    idx, n = group_index(group_ids_B)
    kept: list[int] = []
    short_groups = 0
    for g in range(n):
        members = (idx == g).nonzero().flatten()
        if members.numel() < group_size:
            raise ValueError(f"group {g} has {members.numel()} rollouts, fewer than group_size={group_size}")
        neg, pos = members[~correct[members]], members[correct[members]]
        n_neg = min(neg.numel(), group_size // 2)
        n_pos = min(pos.numel(), group_size - n_neg)
        n_neg = min(neg.numel(), group_size - n_pos)
        short_groups += int(n_neg + n_pos < group_size)
        kept += neg[torch.randperm(neg.numel(), generator=generator)[:n_neg]].tolist()
        if n_pos:
            weights = 1.0 / (penalties[pos].clamp_min(0) + smoothing)
            kept += pos[torch.multinomial(weights, n_pos, replacement=False, generator=generator)].tolist()
    kept_t = torch.tensor(sorted(kept), dtype=torch.long)
    report = {
        "kept": kept_t.numel(),
        "dropped": int(correct.numel() - kept_t.numel()),
        "kept_positive_frac": float(correct[kept_t].float().mean()) if kept_t.numel() else 0.0,
        "kept_penalty_mean": float(penalties[kept_t][correct[kept_t]].mean()) if correct[kept_t].any() else 0.0,
        "candidate_penalty_mean": float(penalties[correct].mean()) if correct.any() else 0.0,
    }
    return kept_t, report

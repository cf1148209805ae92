"""Rejection-sampled SFT (RFT; STaR, Zelikman et al. 2022, "STaR: Bootstrapping Reasoning With Reasoning").

Sample `samples` completions per task from the current policy, keep those the verifier accepts,
and train on them with the SFT loss (ACTION tokens only). The kept episodes are trained exactly as
sampled: their token ids are the policy's own (token in, token out), so nothing is re-tokenized.

The rejection rule (recorded with the metrics): an episode is kept when `is_success` holds (its
`correct` or `success` component is 1) and it ended on its own — not truncated (max_turns,
max_tokens) and not an infrastructure failure. Departures from STaR: no rationalisation step
(failed tasks are not retried with the answer as a hint), and duplicates are kept; how much
diversity was lost is counted instead (tasks with no kept sample, distinct kept completions).
"""

from __future__ import annotations

import torch

from tracerl.contract import TerminalReason, Trajectory, is_success
from tracerl.contract.roles import TokenRole
from tracerl.contract.task import Task
from tracerl.envs.base import EnvSpec
from tracerl.rollout import LoopBudgets, run_episodes
from tracerl.rollout.sources import play_fn

RULE = "verifier success (correct = 1), episode ended on its own (not truncated, not infra_failure)"
CHUNK = 64  # episodes per engine call


def accepted(traj: Trajectory) -> bool:
    """The rejection rule (RULE)."""
    if traj.terminal_reason is None or traj.truncated or traj.terminal_reason == TerminalReason.INFRA_FAILURE:
        return False
    return bool(is_success(traj))


def rejection_sample(engine, spec: EnvSpec, tasks: list[Task], *, samples: int, budgets: LoopBudgets,
                     sampling: dict, seed: int, policy_version: int,
                     tokenizer_hashes: dict[str, str] | None = None,
                     ) -> tuple[list[tuple[list[int], list[TokenRole]]], dict[str, float], list[Trajectory]]:
    """(kept examples, counts, every sampled trajectory). Counts: kept / total episodes, infra
    episodes, tasks with at least one kept sample, distinct kept completions."""
    gen = torch.Generator().manual_seed(seed)
    batch = [t for t in tasks for _ in range(samples)]
    groups = [f"rft-{t.id}" for t in batch]
    trajs: list[Trajectory] = []
    play = play_fn(spec, run_episodes, budgets)  # an envs: run's player: each task in its own environment
    for i in range(0, len(batch), CHUNK):
        trajs += play(engine, batch[i:i + CHUNK], groups[i:i + CHUNK], sampling=sampling,
                      policy_version=policy_version, seed=seed + i, tokenizer_hashes=tokenizer_hashes, generator=gen)
    kept = [t for t in trajs if accepted(t)]
    distinct = {(t.task_id, tuple(t.token_ids)) for t in kept}
    counts = {
        "rft/total": float(len(trajs)),
        "rft/kept": float(len(kept)),
        "rft/kept_rate": len(kept) / len(trajs) if trajs else 0.0,
        "rft/infra": float(sum(t.terminal_reason == TerminalReason.INFRA_FAILURE for t in trajs)),
        "rft/tasks": float(len(tasks)),
        "rft/tasks_kept": float(len({t.task_id for t in kept})),
        "rft/distinct_kept": float(len(distinct)),
    }
    return [(list(t.token_ids), list(t.roles)) for t in kept], counts, trajs

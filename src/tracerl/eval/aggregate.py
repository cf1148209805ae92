"""Aggregates over per-task samples: avg@n, unbiased pass@k, maj@k and tool-use statistics.

Every aggregate weights tasks equally (a task's n samples are averaged first), so a task that
produced more samples does not count more.

- avg@n   mean over tasks of c/n (c correct of n samples).
- pass@k  mean over tasks of the unbiased estimator 1 − C(n−c, k)/C(n, k) (Chen et al. 2021),
          via `tracerl.algorithms.passk.pass_at_k`.
- maj@k   the n samples are cut into ⌊n/k⌋ disjoint chunks of k in sampling order; in each chunk
          the most frequent extracted answer wins (ties: the answer seen first; samples without an
          answer never vote) and the chunk scores 1 when a sample with that answer is correct. A task
          scores the mean over its chunks. maj@1 therefore equals avg@n on tasks with answers.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tracerl.algorithms.passk import pass_at_k
from tracerl.telemetry.episodes import tool_calls


@dataclasses.dataclass
class Sample:
    """One sampled episode of a task, reduced to what the aggregates need."""

    correct: bool
    answer: Any = None
    tool_calls: int = 0
    tool_errors: int = 0
    truncated: bool = False
    action_tokens: int = 0


def avg_at_n(tasks: dict[str, Sequence[Sample]]) -> float:
    return float(np.mean([np.mean([s.correct for s in ss]) for ss in tasks.values()])) if tasks else math.nan


def pass_at(tasks: dict[str, Sequence[Sample]], k: int) -> float:
    """Mean unbiased pass@k; NaN when some task has fewer than k samples."""
    if not tasks or any(len(ss) < k for ss in tasks.values()):
        return math.nan
    return float(np.mean([pass_at_k(len(ss), sum(bool(s.correct) for s in ss), k) for ss in tasks.values()]))


def majority_correct(chunk: Sequence[Sample]) -> bool:
    votes = Counter(s.answer for s in chunk if s.answer is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(s.answer for s in chunk if s.answer is not None and votes[s.answer] == top)
    return any(s.correct for s in chunk if s.answer == winner)


def maj_at(tasks: dict[str, Sequence[Sample]], k: int) -> float:
    if not tasks or any(len(ss) < k for ss in tasks.values()):
        return math.nan
    per_task = []
    for ss in tasks.values():
        chunks = [ss[i:i + k] for i in range(0, len(ss) - k + 1, k)]
        per_task.append(np.mean([majority_correct(c) for c in chunks]))
    return float(np.mean(per_task))


def tool_stats(tasks: dict[str, Sequence[Sample]]) -> dict[str, float]:
    flat = [s for ss in tasks.values() for s in ss]
    if not flat:
        return {}
    calls = sum(s.tool_calls for s in flat)
    used = [s for s in flat if s.tool_calls > 0]
    unused = [s for s in flat if s.tool_calls == 0]
    out = {"tool_calls_per_episode": calls / len(flat), "tool_use_rate": len(used) / len(flat),
           "truncation_rate": sum(s.truncated for s in flat) / len(flat),
           "length_mean": float(np.mean([s.action_tokens for s in flat]))}
    if calls:
        out["tool_error_rate"] = sum(s.tool_errors for s in flat) / calls
    if used:
        out["success_with_tool"] = float(np.mean([s.correct for s in used]))
    if unused:
        out["success_without_tool"] = float(np.mean([s.correct for s in unused]))
    return out


def aggregate(tasks: dict[str, Sequence[Sample]], ks: Iterable[int]) -> dict[str, float]:
    """avg@n, pass@k and maj@k for each k (k ≤ the smallest sample count), and tool statistics."""
    n = min((len(ss) for ss in tasks.values()), default=0)
    out = {"tasks": float(len(tasks)), "samples_per_task": float(n), f"avg@{n}": avg_at_n(tasks)}
    for k in sorted(set(ks)):
        if 1 <= k <= n:
            out[f"pass@{k}"] = pass_at(tasks, k)
            out[f"maj@{k}"] = maj_at(tasks, k)
    out.update(tool_stats(tasks))
    return out


def samples_from_trajectories(trajectories: Iterable[Any], is_correct) -> dict[str, list[Sample]]:
    """Group trajectories by task (in order) into `Sample`s; `is_correct(traj) -> bool`."""
    from tracerl.telemetry.exploration import answer_key

    tasks: dict[str, list[Sample]] = {}
    for t in trajectories:
        calls = tool_calls(t)
        tasks.setdefault(t.task_id, []).append(Sample(
            correct=bool(is_correct(t)), answer=answer_key(t), tool_calls=len(calls),
            tool_errors=sum(s.tool_status not in ("ok", None) for s in calls), truncated=t.truncated,
            action_tokens=t.num_action_tokens))
    return tasks

"""Per-episode metrics from trajectories alone: rewards, groups, lengths, tools, endings, staleness.

Denominators are part of each metric's meaning, so they are fixed here:

- reward, group, length and correctness metrics use *trainable* episodes (an `infra_failure` is
  counted in `rollout/infra_failures`, never averaged into a reward);
- an episode is a success when `contract.is_success` holds (its `correct` / `success` component,
  else its reward, is 1): `reward/success_rate` and the `length/correct_*` / `length/incorrect_*`
  split count full successes only (before, a `correct` component above 0.5, an `env_success`
  ending or any reward above 0 counted);
- `rollout/truncation_rate` is truncated episodes / all episodes;
- a tool call is an observation span whose env named the tool it ran (`info["tool"]`, the span's
  `tool_name`): `tool_calls(traj)`, the one definition the console, the report and the held-out
  numbers all use; a tool error is a call whose status is not "ok";
  `tool/error_rate` = errors / calls, `tool/calls_per_episode` = calls / episodes;
- an invalid action is a span whose status is one of `INVALID_STATUSES`;
  `env/invalid_action_rate` = invalid actions / action turns (spans of kind "action");
- response length is the number of ACTION tokens of an episode;
- staleness of a token is `policy_version − token's policy version` (0 when fully on-policy).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from tracerl.contract import TerminalReason, Trajectory, is_success
from tracerl.telemetry.importance import quantiles

INVALID_STATUSES = frozenset({"invalid_action", "blocked_action", "parse_error"})


def tool_calls(traj: Trajectory) -> list:
    """The spans of `traj` that are tool calls: observations the env attributed to a named tool."""
    return [s for s in traj.spans if s.kind == "observation" and s.tool_name is not None]


def _mean(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else math.nan


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "unknown"


def reward_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    ok = [t for t in trajs if t.trainable]
    if not ok:
        return {}
    r = np.asarray([t.reward for t in ok])
    out = {"reward/mean": float(r.mean()), "reward/std": float(r.std()), "reward/min": float(r.min()),
           "reward/max": float(r.max()), "reward/success_rate": _mean([float(is_success(t)) for t in ok])}
    comps: dict[str, list[float]] = defaultdict(list)
    for t in ok:
        for k, v in t.reward_components.items():
            comps[k].append(v)
    for k, vs in comps.items():
        out[f"reward/{_slug(k)}"] = _mean(vs)
    return out


def group_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Zero-variance fraction: groups whose trainable rewards are all equal carry no GRPO signal."""
    groups: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        if t.trainable:
            groups[t.group_id].append(t.reward)
    if not groups:
        return {}
    var = [float(np.var(v)) for v in groups.values()]
    return {"groups/count": float(len(groups)), "groups/size_mean": _mean([len(v) for v in groups.values()]),
            "groups/zero_var_frac": _mean([float(v == 0.0) for v in var]), "groups/reward_var_mean": _mean(var)}


def length_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    ok = [t for t in trajs if t.trainable]
    if not ok:
        return {}
    lengths = np.asarray([t.num_action_tokens for t in ok], dtype=np.float64)
    out = {"length/mean": float(lengths.mean()), "length/min": float(lengths.min())}
    out.update(quantiles(lengths, "length/", qs=(0.1, 0.5, 0.9)))
    correct = np.asarray([is_success(t) for t in ok])
    for name, sel in (("correct", correct), ("incorrect", ~correct)):
        if sel.any():
            out[f"length/{name}_mean"] = float(lengths[sel].mean())
            out[f"length/{name}_p50"] = float(np.quantile(lengths[sel], 0.5))
    return out


def rollout_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    if not trajs:
        return {}
    n = len(trajs)
    reasons = Counter(t.terminal_reason.value if t.terminal_reason else "none" for t in trajs)
    out = {"rollout/episodes": float(n), "rollout/truncation_rate": sum(t.truncated for t in trajs) / n,
           "rollout/infra_failures": float(reasons.get(TerminalReason.INFRA_FAILURE.value, 0)),
           "rollout/retried": float(sum(t.attempt > 0 for t in trajs))}
    for reason, count in sorted(reasons.items()):
        out[f"rollout/end_{reason}_frac"] = count / n
    return out


def tool_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    if not trajs:
        return {}
    calls = [s for t in trajs for s in tool_calls(t)]
    turns = sum(1 for t in trajs for s in t.spans if s.kind == "action")
    invalid = sum(1 for t in trajs for s in t.spans if s.tool_status in INVALID_STATUSES)
    out = {"tool/calls": float(len(calls)), "tool/calls_per_episode": len(calls) / len(trajs),
           "env/invalid_actions": float(invalid), "env/turns_per_episode": turns / len(trajs)}
    if turns:
        out["env/invalid_action_rate"] = invalid / turns
    if calls:
        errors = [s for s in calls if s.tool_status not in ("ok", None)]  # None: the env gave no status
        out["tool/errors"] = float(len(errors))
        out["tool/error_rate"] = len(errors) / len(calls)
        for status, count in sorted(Counter(s.tool_status or "unknown" for s in calls if s.tool_status != "ok").items()):
            out[f"tool/status_{_slug(status)}"] = float(count)
    latency = [s.tool_latency_s for s in calls if s.tool_latency_s is not None]
    if latency:
        out["tool/latency_mean_s"] = _mean(latency)
        out["tool/latency_max_s"] = float(max(latency))
        out["tool/latency_p90_s"] = float(np.quantile(latency, 0.9))
    return out


def staleness_metrics(trajs: Sequence[Trajectory], policy_version: int) -> dict[str, float]:
    versions = np.asarray([v for t in trajs for v in t.policy_versions if v >= 0], dtype=np.float64)
    if versions.size == 0:
        return {}
    lag = policy_version - versions
    out = {"staleness/mean": float(lag.mean()), "staleness/stale_token_frac": float((lag > 0).mean())}
    out.update(quantiles(lag, "staleness/", qs=(0.5, 0.9)))
    return out


def source_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Per task source: episodes, truncated, retried, infra failures and mean trainable reward."""
    by: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by[_slug(t.task_source or "unknown")].append(t)
    out = {}
    for src, ts in sorted(by.items()):
        ok = [t.reward for t in ts if t.trainable]
        out[f"source/{src}/episodes"] = float(len(ts))
        out[f"source/{src}/truncated"] = float(sum(t.truncated for t in ts))
        out[f"source/{src}/retried"] = float(sum(t.attempt > 0 for t in ts))
        out[f"source/{src}/infra_failures"] = float(sum(not t.trainable for t in ts))
        if ok:
            out[f"source/{src}/reward_mean"] = _mean(ok)
    return out

"""Shared by the levels: in-process training runs, metrics and store reads, small statistics."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from pathlib import Path


def train(recipe: str, run_dir: Path, *overrides: str):
    """One tracerl run in this process (no interpreter start-up per run); returns (Run, wall seconds)."""
    import tracerl

    t0 = time.time()
    run = tracerl.train(recipe, "run.progress=false", f"run.dir={run_dir}", *overrides)
    return run, time.time() - t0


def rl_metrics(run) -> list[dict]:
    return [m for m in run.metrics() if m.get("stage") == "rl" and "reward/mean" in m]


def last_eval(run) -> dict:
    return run.heldout[-1]


def outcome_histogram(run_dir: Path, stage: str = "rl", component: str = "correct") -> dict[str, dict[int, int]]:
    """Per-prompt outcome histograms from the stored episodes: for each RL step, how many groups (one
    prompt's G samples) had k successes, k = 0..G. Keys: 'first' and 'last' step, and 'all' steps pooled."""
    from tracerl.store.export import rows
    from tracerl.store.rundir import RunDir

    by_step: dict[int, dict[str, list[float]]] = {}
    for _, step, traj in rows(RunDir(run_dir), stage=stage):
        ok = float((traj.reward_components or {}).get(component, 0.0)) > 0
        by_step.setdefault(step, {}).setdefault(traj.group_id, []).append(ok)
    if not by_step:
        return {}
    hist = {s: Counter(int(sum(g)) for g in groups.values()) for s, groups in by_step.items()}
    pooled = Counter()
    for h in hist.values():
        pooled.update(h)
    first, last = min(hist), max(hist)
    return {"first": dict(sorted(hist[first].items())), "last": dict(sorted(hist[last].items())),
            "all": dict(sorted(pooled.items()))}


def fmt_hist(h: dict[int, int], g: int) -> str:
    return " ".join(f"{h.get(k, 0):>3}" for k in range(g + 1))


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else float("nan")


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")

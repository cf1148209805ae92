"""Per-trajectory credit the learner assigned: advantage and loss weight, kept beside the episode.

The trainer calls `record_credit` once per update with the advantage and loss weight it gave each
trajectory; they are stored as one `credit` event per step in the run's store (no schema change),
and `read_credit` gives them back keyed by trajectory id for `tracerl export` and `tracerl inspect`.
A token-level estimator may pass one advantage per action token instead of one number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def record_credit(store, step: int, trajectory_ids: Sequence[str], advantages: Sequence[Any],
                  loss_weights: Sequence[float], *, stage: str = "rl") -> None:
    """Store what the update at `step` gave each trajectory (advantages: floats or per-token lists)."""
    def plain(a):
        if hasattr(a, "tolist"):
            a = a.tolist()
        return [float(x) for x in a] if isinstance(a, (list, tuple)) else float(a)

    if not (len(trajectory_ids) == len(advantages) == len(loss_weights)):
        raise ValueError(f"record_credit: {len(trajectory_ids)} trajectories, {len(advantages)} advantages and "
                         f"{len(loss_weights)} loss weights; pass one of each per trajectory")
    payload = {tid: {"advantage": plain(a), "loss_weight": float(w)}
               for tid, a, w in zip(trajectory_ids, advantages, loss_weights)}
    store.add_event("credit", f"advantage and loss weight of {len(payload)} trajectories", stage=stage, step=step,
                    payload={"trajectories": payload})


def per_trajectory(adv_BT, action_BT) -> list:
    """Each row's advantage: one number when it is the same on all its action tokens (sequence-level
    estimators), else the list of its action tokens' advantages in order (token-level ones)."""
    out = []
    for adv_T, act_T in zip(adv_BT, action_BT):
        vals = adv_T[act_T > 0].tolist()
        out.append(vals[0] if vals and all(v == vals[0] for v in vals) else (vals or 0.0))
    return out


def read_credit(store) -> dict[str, dict[str, Any]]:
    """{trajectory_id: {"advantage": float | list[float], "loss_weight": float, "update_step": int}}."""
    out: dict[str, dict[str, Any]] = {}
    for ev in store.events("credit"):
        for tid, c in ev["payload"].get("trajectories", {}).items():
            out[tid] = {**c, "update_step": ev["step"]}
    return out

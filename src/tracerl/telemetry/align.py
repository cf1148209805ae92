"""Bring per-token inputs from the learner into one shape: the values at each trajectory's action tokens.

The learner holds per-token quantities (advantages, entropies, current log-probabilities) in whatever
layout its batch uses. `action_values` accepts the layouts a trainer actually has and returns, for
each trajectory, a float array over its ACTION tokens in position order:

- a 1-D tensor/array of shape (B,): one value per trajectory (e.g. GRPO's `adv_B`), broadcast;
- a 2-D tensor/array (B, T): row i is aligned with trajectory i's token positions from 0
  (value at column t refers to token t); columns past the trajectory's length are ignored;
- a list of B sequences, each either full-length (len(trajectory)) or action-only
  (num_action_tokens), or a scalar per trajectory.

Value at position t means "about token t": for entropy, the entropy of the distribution token t was
sampled from (the learner's logits at t − 1, shifted back into place).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracerl.contract import TokenRole, Trajectory


def to_numpy(x: Any) -> np.ndarray:
    """Tensor (any device/dtype), array, list or scalar -> float64 numpy array."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def action_positions(traj: Trajectory) -> np.ndarray:
    return np.asarray([i for i, r in enumerate(traj.roles) if r == TokenRole.ACTION], dtype=np.int64)


def action_values(values: Any, trajectories: Sequence[Trajectory], name: str = "values") -> list[np.ndarray]:
    """Per trajectory, `values` at its action tokens (see module docstring for accepted layouts)."""
    positions = [action_positions(t) for t in trajectories]
    if not isinstance(values, (list, tuple)):
        arr = to_numpy(values)
        if arr.ndim == 1 and len(arr) == len(trajectories):
            return [np.full(len(p), arr[i]) for i, p in enumerate(positions)]
        if arr.ndim == 2 and arr.shape[0] == len(trajectories):
            values = list(arr)
        else:
            raise ValueError(f"{name}: expected shape (B,) or (B, T) with B={len(trajectories)}, got {arr.shape}")
    if len(values) != len(trajectories):
        raise ValueError(f"{name}: {len(values)} entries for {len(trajectories)} trajectories")
    out = []
    for i, (v, t, pos) in enumerate(zip(values, trajectories, positions)):
        row = to_numpy(v).reshape(-1)
        if row.size == 1:
            out.append(np.full(len(pos), float(row[0])))
        elif row.size == len(pos) and row.size != len(t):
            out.append(row.copy())
        elif len(pos) == 0 or row.size > pos[-1]:
            out.append(row[pos])
        else:
            raise ValueError(f"{name}[{i}]: {row.size} values for trajectory {t.trajectory_id!r} with "
                             f"{len(t)} tokens and {len(pos)} action tokens")
    return out

"""Lossless (de)serialization of trajectories: dicts for JSON, packed bytes for the store."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tracerl.contract.roles import TerminalReason, TokenRole
from tracerl.contract.trajectory import Span, Trajectory

_ARRAYS = ("token_ids", "roles", "behavior_logprobs", "policy_versions")


def to_dict(traj: Trajectory) -> dict[str, Any]:
    """JSON-ready dict with the trajectory contract's field names (docs/architecture.md); roles as lowercase strings, NaN as None."""
    d = dataclasses.asdict(traj)
    d["roles"] = [TokenRole(r).label for r in traj.roles]
    d["behavior_logprobs"] = [None if math.isnan(x) else x for x in traj.behavior_logprobs]
    d["terminal_reason"] = traj.terminal_reason.value if traj.terminal_reason else None
    return d


def from_dict(d: dict[str, Any]) -> Trajectory:
    d = dict(d)
    d["roles"] = [TokenRole.from_label(r) if isinstance(r, str) else TokenRole(r) for r in d["roles"]]
    d["behavior_logprobs"] = [math.nan if x is None else float(x) for x in d["behavior_logprobs"]]
    d["spans"] = [Span(**s) for s in d.get("spans", [])]
    if d.get("terminal_reason") is not None:
        d["terminal_reason"] = TerminalReason(d["terminal_reason"])
    return Trajectory(**d)


def pack_arrays(traj: Trajectory) -> dict[str, bytes]:
    """Per-token arrays as little-endian bytes. Log-probs are float64: bit-exact for any float."""
    return {
        "token_ids": np.asarray(traj.token_ids, dtype="<i8").tobytes(),
        "roles": np.asarray([int(r) for r in traj.roles], dtype="<u1").tobytes(),
        "behavior_logprobs": np.asarray(traj.behavior_logprobs, dtype="<f8").tobytes(),
        "policy_versions": np.asarray(traj.policy_versions, dtype="<i8").tobytes(),
    }


def unpack_arrays(blobs: dict[str, bytes]) -> dict[str, list]:
    return {
        "token_ids": np.frombuffer(blobs["token_ids"], dtype="<i8").tolist(),
        "roles": [TokenRole(int(r)) for r in np.frombuffer(blobs["roles"], dtype="<u1")],
        "behavior_logprobs": np.frombuffer(blobs["behavior_logprobs"], dtype="<f8").tolist(),
        "policy_versions": np.frombuffer(blobs["policy_versions"], dtype="<i8").tolist(),
    }


def metadata_dict(traj: Trajectory) -> dict[str, Any]:
    """Everything but the per-token arrays, JSON-ready."""
    d = to_dict(traj)
    for k in _ARRAYS:
        d.pop(k)
    return d

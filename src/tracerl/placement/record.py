"""Where each role of the running recipe ran, for the run's manifest (`placement` key, written at the end of
each RL stage by `run/pipeline.py` `record_placement`).

A worker group records its role when it starts (`record_role`, `add_workers`): the learner's ranks with their node id,
address, process and device (Ray) or host and process (local); rollout actors are asked where they are
(`rollout_where`, a Ray call) when the manifest is written. Roles nobody recorded ran in the trainer.
"""

from __future__ import annotations

import os
import socket

_ROLES: dict[str, dict] = {}


def record_role(role: str, info: dict) -> None:
    _ROLES[role] = info


def add_workers(role: str, device: str, workers: list[dict]) -> None:
    """A role's Ray actor(s) (`placement.<role>`): several teachers add up under `teachers`, each worker named."""
    had = _ROLES.get(role) or {}
    _ROLES[role] = {"where": "ray", "device": device, "workers": [*had.get("workers", []), *workers]}


def reset(keep: tuple[str, ...] = ()) -> None:
    """Forget what was recorded, but the roles in `keep` (the grader is built once per run, before the stages)."""
    for role in [r for r in _ROLES if r not in keep]:
        del _ROLES[role]


def driver() -> dict:
    """The trainer's own process: host, pid and, on Ray, its node id."""
    out = {"host": socket.gethostname(), "pid": os.getpid()}
    try:
        import ray

        if ray.is_initialized():
            out["node_id"] = ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return out


def snapshot(recipe, rollout: list[dict] | None = None) -> dict:
    """The manifest's `placement` entry: every role, where it ran."""
    from tracerl.config.placement import learner_where

    here = {"where": "trainer", **driver()}
    learner = _ROLES.get("learner") or {"where": learner_where(recipe), "ranks": recipe.learner.ranks, **driver()}
    out = {"trainer": here, "learner": learner,
           "rollout": {"where": "ray", "workers": rollout} if rollout else {"where": "trainer"}}
    for role in ("reference", "critic", "prm", "teachers", "grader"):
        out[role] = _ROLES.get(role) or {"where": "trainer"}
    return out


def ray_actors(class_name: str) -> list[dict]:
    """The live Ray actors of class `class_name` (e.g. the rollout host `_Host`): node id, address and pid each,
    read from Ray's actor table (no dashboard needed); [] when Ray is not up or the table cannot be read."""
    try:
        import ray
        from ray._private import state

        if not ray.is_initialized():
            return []
        table = state.actors()
    except Exception:  # an older / newer Ray without this table: the manifest says nothing rather than guess
        return []
    out = []
    for info in table.values():
        if info.get("State") == "ALIVE" and str(info.get("ActorClassName", "")).split(".")[-1] == class_name:
            addr = info.get("Address") or {}
            out.append({"node_id": addr.get("NodeID"), "ip": addr.get("IPAddress"), "pid": info.get("Pid"),
                        "resources": info.get("RequiredResources") or {}})
    return sorted(out, key=lambda w: (str(w["node_id"]), w["pid"] or 0))


def write_placement(run, recipe) -> None:
    """Merge where each role ran into the run's manifest.json (`placement`)."""
    rollout = ray_actors("_Host") if recipe.run.backend == "ray" else []
    run.write_manifest({**run.read_manifest(), "placement": snapshot(recipe, rollout)})

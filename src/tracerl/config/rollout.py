"""The recipe's `rollout:` section: how many engine workers play a step's rollouts, and how they are seeded
(docs/ray.md, "Data-parallel rollouts").

`workers: 1` keeps the one-worker layout (sync: rollouts in the trainer's process, or in one Ray actor with
`run.backend: ray`; async: one rollout process or actor). With N > 1 the sync loop splits each step's groups
across N workers (spawned processes, or Ray actors with `run.backend: ray`) and puts them back in group
order; the async loop keeps N workers busy with group-sized jobs under the staleness bound η.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg


class RolloutConfig(Cfg):
    workers: int = Field(1, ge=1, le=64)
    """Rollout engine workers, each with its own copy of the policy, synced by version after every update.
    sync: a step's groups are split across them and reassembled in order (spawned processes with
    run.backend: local, Ray actors with run.backend: ray); async: N workers kept busy under rl.max_staleness.
    1: one worker (sync: in the trainer's process locally, one Ray actor on Ray)."""
    seeding: Literal["step", "group"] | None = None
    """How sampling is seeded. step: one generator for a whole step's rows, in row order (the one-worker
    layout's draws); group: each group from its own generator seeded by (step seed, group id), so a group's
    tokens do not depend on which worker plays it (`rollout/group_seeds.py`); a step's jobs are then its
    groups. null: step with one worker, group with several."""
    threads: int = Field(1, ge=1, le=256)
    """torch threads of each rollout worker process or actor (with workers > 1, or in rl.mode: async)."""
    sync_bucket_mb: float = Field(64.0, gt=0, le=1 << 16)
    """Weight sync: the learner's tensors travel to the workers in buckets of at most this many MiB (a
    tensor larger than a bucket travels alone), each tagged with the policy version."""
    weight_sync: Literal["object_store", "queue", "broadcast"] | None = None
    """How the weights travel to the rollout workers. object_store: each bucket ray.put once, read by every
    actor (run.backend: ray); queue: each worker process's queue (run.backend: local); broadcast: a
    torch.distributed group of the driver and every worker (gloo; NCCL when the learner and each Ray actor
    hold a GPU), one broadcast per bucket and dtype (rl.mode: sync with rollout.workers > 1,
    rollout/broadcast_sync.py). null: the backend's own (object_store on Ray, queue locally)."""

    @model_validator(mode="after")
    def _seeding_fits(self) -> RolloutConfig:
        if self.workers > 1 and self.seeding == "step":
            raise ValueError(f"rollout.seeding: step draws a whole step from one generator, which {self.workers} "
                             "rollout.workers cannot share; set rollout.seeding=group (or leave it unset) or "
                             "rollout.workers=1")
        return self

    @property
    def group_seeded(self) -> bool:
        """Whether sampling is seeded per group (the resolved `seeding`)."""
        return (self.seeding or ("group" if self.workers > 1 else "step")) == "group"


def _check_weight_sync(recipe) -> str | None:
    ro, rl, ray = recipe.rollout, recipe.rl, recipe.run.backend == "ray"
    if ro.weight_sync is None:
        return None
    if rl.mode == "sync" and ro.workers == 1 and not ray:
        return (f"rollout.weight_sync={ro.weight_sync} has nothing to move: with rollout.workers: 1 and run.backend: "
                "local the sync loop samples in the trainer's process; set rollout.workers > 1 or drop "
                "rollout.weight_sync")
    if ro.weight_sync == "object_store" and not ray:
        return ("rollout.weight_sync=object_store is Ray's object store, and run.backend: local has none (its workers "
                "are processes fed through their queue); set rollout.weight_sync=queue or broadcast, or run.backend=ray")
    if ro.weight_sync == "queue" and ray:
        return ("rollout.weight_sync=queue feeds local worker processes, and run.backend: ray has actors (fed through "
                "the object store); set rollout.weight_sync=object_store or broadcast, or run.backend=local")
    if ro.weight_sync == "broadcast" and (rl.mode != "sync" or ro.workers == 1):
        why = ("rl.mode: async, whose busy workers read weights only between jobs or turns" if rl.mode != "sync"
               else "one rollout worker")
        return (f"rollout.weight_sync=broadcast blocks until every worker takes the weights, which needs rl.mode: sync "
                f"with rollout.workers > 1, not {why}; set rollout.weight_sync={'object_store' if ray else 'queue'} "
                "(or drop it)" + ("" if rl.mode != "sync" else " or rollout.workers >= 2"))
    return None


def check_rollout(recipe) -> str | None:
    """The first `rollout:` setting the rest of the recipe cannot run, as one sentence (the gateway's clashes with
    rollout settings are refused in config/combinations.py, beside its other clashes)."""
    ro, rl = recipe.rollout, recipe.rl
    problem = _check_weight_sync(recipe)
    if problem:
        return problem
    if rl.mode == "async":
        per_job = 1 if ro.group_seeded else rl.prompts_per_step  # groups per job
        most = (rl.max_staleness + 1) * rl.prompts_per_step // per_job  # the start rule keeps ≤ η + 1 steps outstanding
        if ro.workers > most:
            what = "group-sized" if ro.group_seeded else "step-sized"
            return (f"rollout.workers={ro.workers} is more than the {most} {what} jobs rl.max_staleness="
                    f"{rl.max_staleness} lets run at once, so some workers would never get one; set rollout.workers "
                    f"<= {most} or raise rl.max_staleness" + ("" if ro.group_seeded else
                                                               " (or set rollout.seeding=group: one job per group)"))
    elif ro.threads != 1 and ro.workers == 1 and not (recipe.run.backend == "ray"):
        return ("rollout.threads sizes rollout worker processes, and rollout.workers: 1 in rl.mode: sync plays in the "
                "trainer's process (run.threads); set rollout.workers > 1 or drop rollout.threads")
    return None

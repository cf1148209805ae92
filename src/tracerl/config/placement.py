"""The `placement:` section of a recipe: where each model role's workers run (`tracerl/placement/`,
docs/scale.md).

`placement.learner` hosts the policy learner's `learner.ranks` ranks: in the trainer's process (one rank,
no process group), as local processes (the trainer is rank 0, FSDP2 over gloo or NCCL), or as Ray actors
(every rank an actor in one placement group; the trainer only sends commands). `placement.rollout` adds
custom Ray resources to each rollout actor (their CPUs and GPUs: `ray.num_cpus_per_worker` /
`ray.num_gpus_per_worker`), e.g. `{node_b: 1}` to keep rollouts on the nodes that advertise `node_b`.
`placement.reference`, `.teachers` and `.grader` put the frozen roles (the KL reference, each MOPD teacher, the
learned judge) on a Ray actor of their own, answering the same calls; `placement.critic` and `.prm` put a trained
role there with its parameters and optimizer (its forward, loss and steps run there). At `where: trainer` a role
runs in the trainer's process (`roles.*.device` places it on a device there).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tracerl.config.base import Cfg

class LearnerPlacement(Cfg):
    where: Literal["auto", "inprocess", "processes", "ray"] = "auto"
    """auto: in the trainer's process at `learner.ranks` 1, else local processes (`run.backend: local`) or
    Ray actors (`run.backend: ray`). inprocess: the trainer trains the policy itself (one rank). processes:
    FSDP2 over local processes, the trainer rank 0 (at one rank: FSDP2 at world size 1 in the trainer).
    ray: every rank a Ray actor (needs `run.backend: ray`)."""
    num_cpus: float = Field(1.0, gt=0, le=1024)
    """CPUs each Ray rank reserves (`where: ray`)."""
    num_gpus: float = Field(0.0, ge=0, le=8)
    """GPUs each Ray rank reserves (`where: ray`); with `model.device: cuda` at least 1 (NCCL needs one GPU per
    rank), and the rank trains on its first."""
    resources: dict[str, float] = Field(default_factory=dict, max_length=16)
    """Custom Ray resources each rank reserves (`where: ray`), e.g. `{node_a: 1}`: the ranks go to nodes started
    with them (`ray start --resources '{"node_a": 8}'`)."""
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Placement-group strategy of the ranks' bundles (`where: ray`): PACK as few nodes as possible, SPREAD over
    as many, STRICT_* or fail."""
    start_timeout_s: float = Field(120.0, gt=0, le=86_400)
    """How long the Ray ranks' placement group may wait for its resources before the run stops with one sentence."""


class RolloutPlacement(Cfg):
    resources: dict[str, float] = Field(default_factory=dict, max_length=16)
    """Custom Ray resources each rollout actor reserves (`run.backend: ray`), e.g. `{node_b: 1}`."""


class RolePlacement(Cfg):
    where: Literal["trainer", "ray"] = "trainer"
    """trainer: the role runs in the trainer's process (on its device: `model.reference_device`, `roles.*.device`);
    ray: on a Ray actor of its own (one per teacher; needs `run.backend: ray`), on the same device kind."""
    num_cpus: float = Field(1.0, gt=0, le=1024)
    """CPUs the role's actor reserves (`where: ray`)."""
    num_gpus: float = Field(0.0, ge=0, le=8)
    """GPUs the role's actor reserves (`where: ray`); with the role on a CUDA device at least 1 (it runs on the
    actor's first GPU)."""
    resources: dict[str, float] = Field(default_factory=dict, max_length=16)
    """Custom Ray resources the role's actor reserves (`where: ray`), e.g. `{node_b: 1}`."""


class PlacementConfig(Cfg):
    learner: LearnerPlacement = Field(default_factory=LearnerPlacement)
    """Where the policy learner's ranks run."""
    reference: RolePlacement = Field(default_factory=RolePlacement)
    """Where the KL reference policy scores."""
    teachers: RolePlacement = Field(default_factory=RolePlacement)
    """Where each `roles.teachers` model scores (one actor per teacher, each reserving these resources)."""
    grader: RolePlacement = Field(default_factory=RolePlacement)
    """Where the `roles.grader` judge model grades (a local `path` judge; the actor loads it on its node)."""
    critic: RolePlacement = Field(default_factory=RolePlacement)
    """Where the critic (ppo's value model) scores and trains, its optimizer beside it."""
    prm: RolePlacement = Field(default_factory=RolePlacement)
    """Where PRIME's implicit PRM scores and trains, its optimizer beside it."""
    rollout: RolloutPlacement = Field(default_factory=RolloutPlacement)
    """Extra Ray resources of the rollout actors."""


def learner_where(recipe) -> str:
    """Where the learner's ranks run: inprocess, processes or ray (`placement.learner.where`, auto resolved)."""
    where = recipe.placement.learner.where
    if where != "auto":
        return where
    if recipe.learner.ranks == 1:
        return "inprocess"
    return "ray" if recipe.run.backend == "ray" else "processes"


def _cuda(device: str) -> bool:
    if device == "auto":
        import torch

        return torch.cuda.is_available()
    return device.startswith("cuda")


def check_placement(recipe) -> str | None:
    """The first `placement:` setting that has no effect or cannot be met, as one sentence."""
    pl, ranks = recipe.placement.learner, recipe.learner.ranks
    bad = [k for res in (recipe.placement.rollout.resources, pl.resources,
                         *(getattr(recipe.placement, r).resources for r in ROLES)) for k, v in res.items() if v <= 0]
    if bad:
        return f"placement resources need names and positive amounts, got {bad[0]!r}; fix or drop it"
    if recipe.placement.rollout.resources and recipe.run.backend != "ray":
        return ("placement.rollout.resources places Ray rollout actors, and run.backend is local; set run.backend=ray "
                "or drop placement.rollout.resources")
    for role in ROLES:
        problem = role_problem(recipe, role)
        if problem:
            return problem
    where = learner_where(recipe)
    if where == "inprocess" and ranks > 1:
        return (f"placement.learner.where: inprocess trains one rank, and learner.ranks is {ranks}; set "
                "placement.learner.where=auto or learner.ranks=1")
    if where == "ray" and recipe.run.backend != "ray":
        return "placement.learner.where: ray needs run.backend: ray; set run.backend=ray or placement.learner.where=auto"
    ray_keys = [k for k in ("num_cpus", "num_gpus", "resources", "strategy", "start_timeout_s")
                if k in pl.model_fields_set and getattr(pl, k) != LearnerPlacement.model_fields[k].get_default(
                    call_default_factory=True)]
    if where != "ray" and ray_keys:
        return (f"placement.learner.{ray_keys[0]} sizes Ray learner ranks, and the learner runs {where}; set "
                f"placement.learner.where=ray (with run.backend=ray) or drop it")
    if (where == "ray" or placed_roles(recipe)) and recipe.ray.address is None:
        problem = _local_runtime_problem(recipe)
        if problem:
            return problem
    if recipe.faults.kill_learner_rank_at_step is not None and ranks < 2:
        return ("faults.kill_learner_rank_at_step kills a learner rank beside the trainer, and learner.ranks is 1; set "
                "learner.ranks=2 or drop the fault")
    cuda = _cuda(recipe.model.device)
    if where == "ray" and cuda and pl.num_gpus < 1:
        return (f"Ray learner ranks on model.device {recipe.model.device!r} need a GPU each (NCCL runs one rank per "
                "GPU); set placement.learner.num_gpus=1 or model.device=cpu")
    if where == "ray" and not cuda and pl.num_gpus > 0:
        return ("placement.learner.num_gpus reserves GPUs the CPU learner does not use; set model.device=cuda or "
                "placement.learner.num_gpus=0")
    if where == "processes" and cuda and ranks > 1:
        import torch

        have = torch.cuda.device_count()
        if have < ranks:
            return (f"learner.ranks: {ranks} local NCCL ranks need a GPU each and this machine has {have}; lower "
                    "learner.ranks, or run the ranks on a Ray cluster (run.backend=ray, placement.learner.num_gpus=1)")
    return None


def _local_runtime_problem(recipe) -> str | None:
    """Ray learner ranks on the run's own local runtime (`ray.address: null`): what it cannot hold, as one sentence."""
    pl, ray, ranks = recipe.placement.learner, recipe.ray, recipe.learner.ranks
    custom = sorted({*pl.resources, *recipe.placement.rollout.resources,
                     *(k for r in placed_roles(recipe) for k in getattr(recipe.placement, r).resources)})
    if custom:
        return (f"placement resources {custom} name custom Ray resources, and the local Ray runtime (ray.address null) "
                "has none, so the actors would wait forever; connect to a cluster whose nodes have them with "
                "ray.address, or drop them")
    workers = recipe.rollout.workers
    placed = placed_roles(recipe)
    role_cpus = sum(getattr(recipe.placement, r).num_cpus * _actors(recipe, r) for r in placed)
    need = (ranks * pl.num_cpus if learner_where(recipe) == "ray" else 0.0) + workers * ray.num_cpus_per_worker + role_cpus
    if need > ray.num_cpus:
        who = ([f"{ranks} learner ranks"] if learner_where(recipe) == "ray" else []) + [f"{workers} rollout actor(s)"]
        who += [f"the {r}" for r in placed]
        return (f"the Ray actors of this run ({', '.join(who)}) need {need:g} CPUs, more than the local runtime's ray.num_cpus {ray.num_cpus}, so an actor would wait forever; "
                f"raise ray.num_cpus to {need:g}")
    return None


ROLES = ("reference", "teachers", "grader", "critic", "prm")  # the roles `placement.<role>` can put on a Ray actor


def placed_roles(recipe) -> list[str]:
    """The roles the recipe puts on Ray actors of their own (`placement.<role>.where: ray`)."""
    return [r for r in ROLES if getattr(recipe.placement, r).where == "ray"]


def _actors(recipe, role: str) -> int:
    return max(1, len(recipe.roles.teachers)) if role == "teachers" else 1


def _role_devices(recipe, role: str) -> list[str]:
    m, cfg = recipe.model, recipe.roles
    if role == "reference":
        return [m.reference_device or m.device]
    if role == "teachers":
        return [t.device or m.device for t in cfg.teachers] or [m.device]
    sub = {"grader": cfg.grader, "critic": cfg.critic, "prm": cfg.prm}[role]
    return [(sub.device if sub is not None else None) or m.device]


def _role_unused(recipe, role: str) -> str | None:
    """Why `placement.<role>` places nothing in this recipe, as one sentence; None when the role exists."""
    algo = recipe.rl.algorithm
    if role == "grader":
        g = recipe.roles.grader
        if g is None:
            return "placement.grader places the roles.grader judge, and none is set; drop placement.grader or set roles.grader"
        if g.url is not None:
            return ("placement.grader places a local judge model, and roles.grader.url is an endpoint that runs elsewhere "
                    "already; drop placement.grader or give roles.grader.path")
        return None
    if role == "reference" and recipe.model.lora is not None:
        return ("with model.lora the KL reference is the policy itself with its adapter disabled, in the trainer, so "
                "placement.reference.where: ray cannot apply; drop it or set model.lora=null")
    if role not in algo.roles():
        what = {"reference": "the KL reference", "teachers": "the teachers", "critic": "the critic", "prm": "the PRM"}[role]
        fix = "set rl.algorithm.kl.coef > 0" if role == "reference" else \
            f"choose rl.algorithm {dict(teachers='mopd', critic='ppo', prm='prime')[role]}"
        return (f"placement.{role} places {what}, which rl.algorithm {algo.name!r} does not use with these settings; "
                f"drop placement.{role} or {fix}")
    return None


def role_problem(recipe, role: str) -> str | None:
    """`placement.<role>` settings with no effect or no way to run, as one sentence."""
    spec = getattr(recipe.placement, role)
    if spec.where == "trainer":
        moved = [k for k in ("num_cpus", "num_gpus", "resources") if k in spec.model_fields_set
                 and getattr(spec, k) != RolePlacement.model_fields[k].get_default(call_default_factory=True)]
        if moved:
            return (f"placement.{role}.{moved[0]} sizes a Ray actor, and the {role} runs in the trainer; set "
                    f"placement.{role}.where=ray or drop it")
        return None
    if recipe.run.backend != "ray":
        return f"placement.{role}.where: ray needs run.backend: ray; set run.backend=ray or drop it"
    problem = _role_unused(recipe, role)
    if problem:
        return problem
    cuda = [_cuda(d) for d in _role_devices(recipe, role)]
    if any(cuda) and spec.num_gpus < 1:
        return (f"a Ray {role} on a CUDA device needs a GPU; set placement.{role}.num_gpus=1 or put the role on the CPU "
                f"({'model.reference_device' if role == 'reference' else f'roles.{role}.device'}=cpu)")
    if not any(cuda) and spec.num_gpus > 0:
        return f"placement.{role}.num_gpus reserves a GPU the CPU {role} does not use; set it to 0"
    return None

"""What the sync and async RL loops set up alike before their first step: the model roles, the
algorithm's state, the budgets, gates, audit and probe replays, and the token classifier — each
restored from the `RLState` of a resumed run."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from tracerl.algorithms.spec import AlgorithmState
from tracerl.models.device import resolve_device
from tracerl.placement import record
from tracerl.rollout import LoopBudgets
from tracerl.telemetry import GateMonitor
from tracerl.telemetry.exploration import tag_classifier, tokenizer_pieces
from tracerl.train.audits import AuditReplay, ProbeReplay
from tracerl.train.aux_roles import AUX_ROLES, build_aux_roles
from tracerl.train.roles import FrozenRole, PolicyRole, Roles
from tracerl.train.update import rl_update


@dataclasses.dataclass
class Learner:
    roles: Roles
    astate: AlgorithmState
    budgets: LoopBudgets
    gates: GateMonitor
    audits: AuditReplay
    probe: ProbeReplay
    classify: object
    update: Callable = rl_update  # the one RL step (train/update.py), whatever the policy role's placement


def build_learner(recipe, algo, model, tokenizer, *, spec, state, reference, stage_index: int) -> Learner:
    cfg = recipe.rl
    policy = _policy_role(recipe)
    record.reset(keep=("grader",))  # a sharded policy records where its ranks run (placement/record.py)
    schedule = {"kind": cfg.lr_schedule, "steps": cfg.steps, "min_ratio": cfg.min_lr_ratio}
    roles = Roles(policy(model, lr=cfg.lr, max_grad_norm=cfg.max_grad_norm, sampling=recipe.sampling.model_dump(),
                         state=(state.roles_state or {}).get("policy"), share_prefix=recipe.learner.share_prefix,
                         schedule=schedule, **_packing(recipe)),
                  _reference_role(recipe, reference) if reference is not None else None,
                  build_aux_roles(recipe, model, state.roles_state, tokenizer))
    missing = algo.roles() - {"policy", *AUX_ROLES} - ({"reference"} if reference is not None else set())
    if missing:
        raise ValueError(f"algorithm {algo.name!r} needs the {', '.join(sorted(missing))} role(s), which the trainer did not get")
    astate = AlgorithmState(algo, seed=recipe.run.seed * 7_919 + stage_index)
    if state.algorithm_state:
        astate.load_state_dict(state.algorithm_state)
    gates = GateMonitor(recipe.gates)
    if state.gate_state:
        gates.load_state_dict(state.gate_state)
    return Learner(roles, astate, LoopBudgets.from_env(recipe.env), gates, AuditReplay.for_run(spec, recipe.gates),
                   ProbeReplay.for_run(recipe.gates), tag_classifier(tokenizer_pieces(tokenizer)))


def _policy_role(recipe):
    """The policy role's class, by `placement.learner` (config/placement.py): in this process, or sharded over a
    learner group of local processes or Ray actors (train/fsdp_group.py); the update is `rl_update` either way,
    and the auxiliary roles are placed by `placement.<role>` (`train/aux_roles.py`)."""
    from tracerl.config.placement import learner_where

    where = learner_where(recipe)
    if where == "inprocess":
        return PolicyRole
    from tracerl.train.fsdp_group import ShardedPolicyRole

    kw = {"ranks": recipe.learner.ranks, "threads": recipe.run.threads}
    kw |= {"checkpoint_format": "sharded"} if recipe.learner.checkpoint_format == "sharded" else {}
    device = str(resolve_device(recipe.model.device))
    kw |= {"device": device} if device != "cpu" else {}
    kw |= {"ray_spec": recipe.placement.learner} if where == "ray" else {}
    at = recipe.faults.kill_learner_rank_at_step
    return functools.partial(ShardedPolicyRole, **kw, **({"kill_at": at} if at is not None else {}))


def _reference_role(recipe, reference):
    """The KL reference: a `FrozenRole` here, or on a Ray actor of its own (`placement.reference.where: ray`)."""
    kw = dict(temperature=recipe.sampling.temperature, share_prefix=recipe.learner.share_prefix)
    spec = recipe.placement.reference
    if spec.where == "trainer":
        return FrozenRole(reference, **kw)
    from tracerl.placement.remote_roles import RemoteFrozenRole

    device = str(resolve_device(recipe.model.reference_device or recipe.model.device, what="model.reference_device"))
    return RemoteFrozenRole("reference", reference, **kw, spec=spec, device=device, threads=recipe.run.threads)


def _packing(recipe) -> dict:
    """The policy's packing, micro-batch and optimizer settings (`learner.packing`,
    `learner.max_tokens_per_micro_batch`, `learner.optimizer`), in one process or on every rank."""
    lc = recipe.learner
    out = {"packing": True} if lc.packing else {}
    out |= {"optimizer": lc.optimizer} if lc.optimizer != "adamw" else {}
    return out | ({"max_tokens_per_micro_batch": lc.max_tokens_per_micro_batch}
                  if lc.max_tokens_per_micro_batch is not None else {})

"""What the sync and async RL loops set up alike before their first step: the model roles, the
algorithm's state, the budgets, gates, audit and probe replays, and the token classifier — each
restored from the `RLState` of a resumed run."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from tracerl.algorithms.spec import AlgorithmState
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
    update: Callable = rl_update  # the policy update (train/update.py; sharded: train/fsdp_group.py)


def build_learner(recipe, algo, model, tokenizer, *, spec, state, reference, stage_index: int) -> Learner:
    cfg = recipe.rl
    policy, sharded = _policy_role(recipe)
    schedule = {"kind": cfg.lr_schedule, "steps": cfg.steps, "min_ratio": cfg.min_lr_ratio}
    roles = Roles(policy(model, lr=cfg.lr, max_grad_norm=cfg.max_grad_norm, sampling=recipe.sampling.model_dump(),
                         state=(state.roles_state or {}).get("policy"), share_prefix=recipe.learner.share_prefix,
                         schedule=schedule),
                  FrozenRole(reference, temperature=recipe.sampling.temperature, share_prefix=recipe.learner.share_prefix)
                  if reference is not None else None,
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
                   ProbeReplay.for_run(recipe.gates), tag_classifier(tokenizer_pieces(tokenizer)),
                   **({"update": sharded} if sharded else {}))


def _policy_role(recipe):
    """(policy role class, update function or None): `learner.ranks > 1` shards the policy (train/fsdp_group.py)."""
    if recipe.learner.ranks == 1:
        return PolicyRole, None
    from tracerl.train.fsdp_group import ShardedPolicyRole, sharded_rl_update

    return functools.partial(ShardedPolicyRole, ranks=recipe.learner.ranks, threads=recipe.run.threads), sharded_rl_update

"""Playing tasks of several environments in one rollout call (`envs:` runs).

`EnvPlayer` plays each task in the environment it belongs to, with that environment's budgets, in
one `run_episodes` call per environment (so a group, one task's rollouts, never mixes
environments), and returns the trajectories in the order of the tasks. It has a spec's `name` and a
`play` method: rollout workers, Ray actors and the trainer's own process call it alike.

`RoutesRef` is how a worker process rebuilds the player: the environments by registered name with
their reward weights and budgets, the task → environment map, the fault settings and the modules
that register user environments — all picklable.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping

from tracerl.envs.base import EnvSpec, get_env
from tracerl.errors import UserError
from tracerl.rollout.agent_loop import LoopBudgets, run_episodes


class EnvPlayer:
    """Plays each task in its own environment (see the module docstring)."""

    def __init__(self, specs: Mapping[str, EnvSpec], budgets: Mapping[str, LoopBudgets], task_env: Mapping[str, str]):
        self.specs, self.budgets, self.task_env = dict(specs), dict(budgets), dict(task_env)
        self.name = "+".join(self.specs)

    @classmethod
    def for_routes(cls, routes, task_env: Mapping[str, str]) -> EnvPlayer:
        """Over a run's routes (each with `name`, `spec`, `budgets`: run/multienv.py `EnvRoute`)."""
        return cls({r.name: r.spec for r in routes}, {r.name: r.budgets for r in routes}, task_env)

    def env_of(self, task) -> str:
        name = self.task_env.get(task.id)
        if name is None or name not in self.specs:
            raise UserError(f"task {task.id!r} belongs to no environment of this run; it must come from an envs: entry")
        return name

    def play(self, engine, tasks, group_ids, *, sampling, policy_version, seed, tokenizer_hashes=None,
             generator=None, entropy_out=None, on_turn=None, budgets=None) -> list:
        """Each task's episode in its own environment, returned in the order of `tasks`; `budgets`
        (environment name → `LoopBudgets`) overrides the player's own for this call."""
        budgets = {**self.budgets, **(budgets if isinstance(budgets, Mapping) else {})}
        by: dict[str, list[int]] = {}
        for i, t in enumerate(tasks):
            by.setdefault(self.env_of(t), []).append(i)
        out: list = [None] * len(tasks)
        for k, (name, idx) in enumerate(by.items()):
            trajs = run_episodes(engine, self.specs[name], [tasks[i] for i in idx], [group_ids[i] for i in idx],
                                 budgets=budgets[name], sampling=sampling, policy_version=policy_version,
                                 seed=seed + 1_000_003 * k, tokenizer_hashes=tokenizer_hashes,
                                 generator=generator, entropy_out=entropy_out, on_turn=on_turn)
            for i, t in zip(idx, trajs):
                out[i] = t
        return out


@dataclasses.dataclass
class RoutesRef:
    """How a worker process rebuilds an `EnvPlayer` (see the module docstring)."""

    envs: dict[str, dict | None]  # name -> reward weights (None: the environment's own)
    budgets: dict[str, LoopBudgets]
    task_env: dict[str, str]
    faults: dict | None = None
    modules: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return "+".join(self.envs)

    @classmethod
    def for_routes(cls, routes, task_env: Mapping[str, str], faults: dict | None) -> RoutesRef:
        """From a run's routes (each with `name`, `spec`, `budgets`: run/multienv.py `EnvRoute`)."""
        modules = {getattr(get_env(r.name).make, "__module__", None) for r in routes}
        return cls({r.name: dict(r.spec.reward_weights) for r in routes}, {r.name: r.budgets for r in routes},
                   dict(task_env), faults, tuple(sorted(m for m in modules if m and m != "__main__")))

    def build(self) -> EnvPlayer:
        from tracerl.config.faults import FaultsConfig
        from tracerl.rollout.faults import wrap_spec

        for m in self.modules:
            importlib.import_module(m)
        faults = FaultsConfig(**self.faults) if self.faults else None
        specs = {}
        for name, weights in self.envs.items():
            spec = get_env(name)
            if weights is not None:
                spec = dataclasses.replace(spec, reward_weights=dict(weights))
            specs[name] = wrap_spec(spec, faults)
        return EnvPlayer(specs, self.budgets, self.task_env)

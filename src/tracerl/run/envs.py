"""The environments of a run and their tasks: one route for a recipe's `env:`, one per `envs:` entry.

`RunEnvs.load` resolves the routes (run/multienv.py: each route's training spec carries the
recipe's `faults:`, its `clean` spec is the env as it is, for held-out evaluation), builds each
route's task pool before any profile-based filter (SFT demonstrations and the manifest use it;
each RL stage builds its own pool from it, run/rl_stage.py) and its held-out tasks, and maps
every task id to its environment. `mixed` is true with `envs:`: only then do RL stages draw through
an `EnvMixtureSampler` and play through an `EnvRouter`, held-out numbers come per environment, and
SFT records the share of each environment's demonstrations.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

from tracerl.contract.task import Task
from tracerl.envs.base import get_env
from tracerl.errors import UserError
from tracerl.rollout.faults import wrap_spec
from tracerl.tasks import TaskPool, build_pool
from tracerl.train.demos import collect_demos_counted
from tracerl.run.multienv import EnvRoute, resolve_routes


def expert_kwargs(recipe, error_rate: float | None = None) -> dict:
    """Keyword arguments for an env's scripted expert (collect_demos passes only those it accepts);
    `error_rate`: the route's, default `sft.expert_error_rate`."""
    kw = {"tool_rate": recipe.sft.expert_tool_rate}
    error_rate = recipe.sft.expert_error_rate if error_rate is None else error_rate
    if error_rate is not None:
        kw["error_rate"] = error_rate
    return kw


def unfiltered(cfg):
    """`cfg` without the filters that need pass rates (all-pass / all-fail)."""
    return cfg.model_copy(update={"filters": cfg.filters.model_copy(update={"all_pass": False, "all_fail": False})})


@dataclasses.dataclass
class RunEnvs:
    routes: list[EnvRoute]
    pools: dict[str, TaskPool]  # each route's pool before profile-based filters
    heldout: dict[str, list[Task]]
    task_env: dict[str, str]  # task id -> environment
    mixed: bool  # the recipe lists envs:

    @classmethod
    def load(cls, recipe) -> RunEnvs:
        seed = recipe.run.seed
        routes = resolve_routes(recipe, wrap=lambda s: wrap_spec(s, recipe.faults))
        pools = {r.name: build_pool(unfiltered(r.tasks), generator_of=get_env) for r in routes}
        heldout = {r.name: pools[r.name].heldout or r.spec.generate("heldout", r.env.heldout_tasks, seed,
                                                                    tuple(r.env.heldout_difficulty)) for r in routes}
        task_env: dict[str, str] = {}
        for r in routes:
            for t in pools[r.name].train + heldout[r.name]:
                if task_env.setdefault(t.id, r.name) != r.name:
                    raise UserError(f"task id {t.id!r} is in the pools of both {task_env[t.id]!r} and {r.name!r}; "
                                    "give each environment's tasks their own ids")
        return cls(routes, pools, heldout, task_env, bool(recipe.envs))

    def rollout_spec(self):
        """What a rollout of the run's tasks plays outside the RL stages (rejection sampling): the one env's
        training spec, or an `EnvPlayer` over every environment (each task in its own, with its budgets)."""
        if not self.mixed:
            return self.routes[0].spec
        from tracerl.rollout.routes import EnvPlayer

        return EnvPlayer.for_routes(self.routes, self.task_env)

    def train_tasks(self) -> list:
        """The training pools, interleaved environment by environment (a prefix holds each in turn)."""
        pools = [self.pools[r.name].train for r in self.routes]
        return [t for row in itertools.zip_longest(*pools) for t in row if t is not None]

    def routes_ref(self, recipe):
        """What a rollout worker process plays every environment of an `envs:` run from; None for one env."""
        if not self.mixed:
            return None
        from tracerl.rollout.routes import RoutesRef

        return RoutesRef.for_routes(self.routes, self.task_env, recipe.faults.model_dump() if recipe.faults.active
                                    else None)

    @property
    def name(self) -> str:
        return "+".join(r.name for r in self.routes)

    @property
    def max_tokens(self) -> int:
        return max(r.env.max_tokens for r in self.routes)

    def special_tokens(self) -> list[str]:
        return list(dict.fromkeys(tag for r in self.routes for tag in r.spec.special_tokens))

    def heldout_prompts(self) -> list[str]:
        return [str(t.prompt) for r in self.routes for t in self.heldout[r.name]]

    def collect_demos(self, recipe, *, say) -> tuple[list, dict[str, int]]:
        """Each environment's expert demonstrations on its first training tasks, and their count per environment."""
        t0, demos, counts, lines = time.time(), [], {}, {}
        for r in self.routes:
            got, count = collect_demos_counted(r.spec, self.pools[r.name].train[: r.demos], seed=recipe.run.seed,
                                               max_turns=r.env.max_turns,
                                               expert_kwargs=expert_kwargs(recipe, r.expert_error_rate))
            counts[r.name], lines[r.name] = len(got), count.line()  # "80 of 80 demonstrations used", or why not
            demos += got
        total, took = max(1, len(demos)), f"{time.time() - t0:.1f}s"
        say(f"collected {len(demos)} expert demonstrations in {took}: "
            + ", ".join(f"{n} {c} ({c / total:.0%}; {lines[n]})" for n, c in counts.items()) if self.mixed
            else f"collected {len(demos)} expert demonstrations through {self.name} in {took}: {lines[self.name]}")
        return demos, counts

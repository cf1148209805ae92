"""One RL run over several environments (`envs:` in a recipe; `tracerl.config.envs`).

`resolve_routes` turns each `envs:` entry into an `EnvRoute` (its spec with the entry's reward
weights, budgets, task config, demo and eval counts); a recipe without `envs:` is the one route of
its `env:`. `EnvRouter` stands where the trainer expects an env spec: it plays each task in its own
environment (`play`: one `run_episodes` call per
environment, so a group, one task's rollouts, never mixes environments), reports per-domain
metrics (`step_metrics`), optionally rescales rewards per environment (`normalize`) and watches
per-domain held-out success (`gate`). `EnvMixtureSampler` draws each batch's tasks across the
environments at their target shares (cumulative counts track the targets to within one task).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tracerl.contract import is_success
from tracerl.envs.base import EnvSpec, get_env
from tracerl.envs.native_tools import native_spec
from tracerl.config.envs import EnvEntry
from tracerl.rollout import LoopBudgets
from tracerl.rollout.routes import EnvPlayer, RoutesRef
from tracerl.tasks import TasksConfig
from tracerl.tasks.samplers import allocate
from tracerl.telemetry import episodes
from tracerl.telemetry.gates import GateTrip
from tracerl.run.stages import recipe_tasks


@dataclasses.dataclass
class EnvRoute:
    name: str
    spec: EnvSpec  # for training: the entry's reward weights, then `wrap` (fault injection)
    env: Any  # config.EnvConfig with this environment's budgets and task counts
    share: float
    tasks: TasksConfig
    demos: int
    eval_tasks: int
    expert_error_rate: float | None
    clean: EnvSpec | None = None  # the spec before `wrap`: held-out evaluation plays the env as it is

    @property
    def budgets(self) -> LoopBudgets:
        return LoopBudgets.from_env(self.env)


def resolve_routes(recipe, *, wrap=None) -> list[EnvRoute]:
    """The run's environments with every inherited setting filled in (`wrap`: e.g. fault injection).

    A recipe without `envs:` has one route, its `env:` with the recipe's `tasks:`: the one-entry case."""
    entries = recipe.envs or [EnvEntry(name=recipe.env.name, tasks=recipe.tasks)]
    total = sum(e.share for e in entries)
    routes = []
    for e in entries:
        clean = native_spec(get_env(e.name), recipe.env.tool_format, recipe.env.tool_parser)  # env.tool_format
        if e.reward_weights is not None:
            clean = dataclasses.replace(clean, reward_weights=dict(e.reward_weights))
        spec = wrap(clean) if wrap is not None else clean
        fields = {k: getattr(e, k) for k in ("train_tasks", "heldout_tasks", "train_difficulty", "heldout_difficulty",
                                              "max_turns", "max_tokens", "max_new_tokens", "step_timeout_s")
                  if getattr(e, k) is not None}
        env = recipe.env.model_copy(update={"name": e.name, **fields})
        tasks = recipe_tasks(recipe, e.tasks or TasksConfig(), env)
        demos = e.demos if e.demos is not None else round(recipe.sft.demos * e.share / total)
        error = e.expert_error_rate if e.expert_error_rate is not None else recipe.sft.expert_error_rate
        routes.append(EnvRoute(e.name, spec, env, e.share, tasks, demos, e.eval_tasks or recipe.eval.tasks, error,
                               clean))
    return routes


def stage_envs(recipe) -> list[list[str]]:
    """The environments of each RL stage (a stage without `envs` keeps the previous stage's)."""
    current = [e.name for e in recipe.envs] or [recipe.env.name]
    if not recipe.rl.stages:
        return [current]
    out = []
    for st in recipe.rl.stages:
        current = list(st.envs) if st.envs is not None else current
        out.append(current)
    return out


class EnvMixtureSampler:
    """Draws `n` tasks per batch across environments at target shares; each environment's own
    sampler picks which of its tasks. State: the carried credit, draw counts and every child state."""

    kind = "env_mixture"

    def __init__(self, samplers: Mapping[str, Any], shares: Mapping[str, float], *, schedule: str = "mixed"):
        total = sum(shares.values())
        self.samplers, self.targets = dict(samplers), {k: v / total for k, v in shares.items()}
        self.schedule = schedule  # alternate: the whole batch from one environment, in turns at the target shares
        self.credit: dict[str, float] = {}
        self.drawn = {k: 0 for k in self.samplers}

    def next_batch(self, n: int) -> list:
        if self.schedule == "alternate":  # one draw of whole batches: the environment whose turn is due
            counts = {k: n * c for k, c in allocate(1, self.targets, self.credit).items()}
        else:
            counts = allocate(n, self.targets, self.credit)
        out = []
        for name in self.samplers:  # the recipe's order
            if counts.get(name):
                out.extend(self.samplers[name].next_batch(counts[name]))
                self.drawn[name] += counts[name]
        return out

    def metrics(self) -> dict[str, float]:
        total = sum(self.drawn.values()) or 1
        out = {}
        for name, s in self.samplers.items():
            out[f"tasks/env_share/{name}"] = self.drawn[name] / total
            out[f"tasks/env_target/{name}"] = self.targets[name]
            out |= {k.replace("tasks/", f"tasks/{name}/", 1): v for k, v in s.metrics().items()}
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "credit": dict(self.credit), "drawn": dict(self.drawn),
                "children": {k: s.state_dict() for k, s in self.samplers.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("kind") != self.kind or set(state["children"]) != set(self.samplers):
            raise ValueError("sampler state was saved for another set of environments")
        self.credit = {k: float(v) for k, v in state["credit"].items()}
        self.drawn = {k: int(v) for k, v in state["drawn"].items()}
        for k, s in self.samplers.items():
            s.load_state_dict(state["children"][k])


def domain_metrics(name: str, trajs: Sequence, generated: Sequence, n_kept: int, n_generated: int,
                   target: float) -> dict[str, float]:
    """Per-domain telemetry of one step, `domain/<env>/*`: reward (mean, std, scale), success, length,
    truncation, tool errors, invalid actions, zero-variance groups, and the observed share of the
    batch after selection next to the generated share and the target."""
    p = f"domain/{name}/"
    out = {p + "share_target": target, p + "share_observed": len(trajs) / n_kept if n_kept else 0.0,
           p + "share_generated": len(generated) / n_generated if n_generated else 0.0,
           p + "episodes": float(len(trajs))}
    ok = [t for t in trajs if t.trainable]
    if ok:
        r = [t.reward for t in ok]
        mean = sum(r) / len(r)
        out |= {p + "reward": mean, p + "reward_std": math.sqrt(sum((x - mean) ** 2 for x in r) / len(r)),
                p + "reward_abs_max": max(abs(x) for x in r),
                p + "success": sum(is_success(t) for t in ok) / len(ok),
                p + "length": sum(t.num_action_tokens for t in ok) / len(ok)}
    if trajs:
        ro, tm = episodes.rollout_metrics(trajs), episodes.tool_metrics(trajs)
        out[p + "truncation"] = ro["rollout/truncation_rate"]
        out[p + "infra_failures"] = ro["rollout/infra_failures"]
        out[p + "tool_errors"] = tm.get("tool/errors", 0.0)
        out[p + "tool_error_rate"] = tm.get("tool/error_rate", 0.0)
        out[p + "invalid_action_rate"] = tm.get("env/invalid_action_rate", 0.0)
        groups: dict[str, list[float]] = defaultdict(list)
        for t in ok:
            groups[t.group_id].append(t.reward)
        zero = sum(1 for v in groups.values() if max(v) == min(v))
        out[p + "zero_variance_groups"] = float(zero)
        out[p + "zero_var_frac"] = zero / len(groups) if groups else 0.0
    return out


class EnvRouter:
    """Stands for the env spec in the trainer; see the module docstring."""

    def __init__(self, routes: Sequence[EnvRoute], active: Sequence[str], task_env: Mapping[str, str], *,
                 normalize: bool = False, tolerance: float | None = None, best: Mapping[str, float] | None = None,
                 loss_share: str = "tokens"):
        self.routes = {r.name: r for r in routes}
        self.active = list(active)
        self.name = "+".join(self.active)
        self.task_env = dict(task_env)
        self.player = EnvPlayer.for_routes(routes, task_env)
        total = sum(self.routes[n].share for n in self.active)
        self.targets = {n: self.routes[n].share / total for n in self.active}
        self.normalize_rewards, self.tolerance, self.loss_share = normalize, tolerance, loss_share
        self.best: dict[str, float] = dict(best or {})

    def env_of(self, task) -> str:
        return self.player.env_of(task)

    def play(self, engine, tasks, group_ids, **kw) -> list:
        """Each task's episode in its own environment, returned in the order of `tasks` (`EnvPlayer.play`)."""
        return self.player.play(engine, tasks, group_ids, **kw)

    def routes_ref(self, faults: dict | None) -> RoutesRef:
        """What a rollout worker process rebuilds this router's player from."""
        return RoutesRef.for_routes(list(self.routes.values()), self.task_env, faults)

    def max_tokens_of(self, trajs: Sequence) -> torch.Tensor:
        """Each trajectory's episode token budget: its environment's `max_tokens` (DAPO's overlong penalty)."""
        return torch.tensor([self.player.budgets[t.env_name].max_tokens for t in trajs], dtype=torch.long)

    def step_metrics(self, trajs: Sequence, generated: Sequence) -> dict[str, float]:
        kept = defaultdict(list)
        gen = defaultdict(list)
        for t in trajs:
            kept[t.env_name].append(t)
        for t in generated:
            gen[t.env_name].append(t)
        out = {}
        for name in self.active:
            out |= domain_metrics(name, kept[name], gen[name], len(trajs), len(generated), self.targets[name])
        return out

    def normalize(self, rewards: torch.Tensor, trajs: Sequence) -> tuple[torch.Tensor, dict[str, float]]:
        """With `mixture.normalize_rewards`: each environment's rewards divided by their std in the batch
        (an environment whose rewards are all equal is left as it is)."""
        if not self.normalize_rewards:
            return rewards, {}
        out, stats = rewards.clone(), {}
        names = [t.env_name for t in trajs]
        for name in self.active:
            sel = torch.tensor([n == name for n in names])
            if sel.sum() < 2:
                continue
            std = float(rewards[sel].std(unbiased=False))
            if std > 1e-8:
                out[sel] = rewards[sel] / std
            stats[f"domain/{name}/reward_norm_scale"] = 1.0 / std if std > 1e-8 else 1.0
        return out, stats

    def share_loss(self, batch, trajs: Sequence) -> dict[str, float]:
        """With `mixture.loss_share: episodes`: scale each environment's loss weights (`batch.weight_B`, in
        place) by (its share of the trained episodes) / (its share of their action tokens)."""
        if self.loss_share != "episodes":
            return {}
        names = [t.env_name for t in trajs]
        batch.weight_B = batch.weight_B.float()
        tokens, rows = batch.mask_BT.sum(dim=1), batch.weight_B > 0
        all_tokens, all_rows = float(tokens.sum()), int(rows.sum())
        stats = {}
        for name in self.active:
            sel = torch.tensor([n == name for n in names]) & rows
            mine = float(tokens[sel].sum())
            if mine > 0:
                factor = (int(sel.sum()) / all_rows) / (mine / all_tokens)
                batch.weight_B[sel] = batch.weight_B[sel] * factor
                stats[f"domain/{name}/loss_weight"] = factor
        return stats

    def gate(self, step: int, metrics: Mapping[str, float]) -> GateTrip | None:
        """Trip when an environment's held-out success falls more than the tolerance below its best."""
        trip = None
        for name in self.routes:
            value = metrics.get(f"eval/{name}/success")
            if value is None:
                continue
            best = self.best.get(name)
            if trip is None and self.tolerance is not None and best is not None and value < best - self.tolerance:
                trip = GateTrip("domain_regression", step, float(value), float(best - self.tolerance),
                                f"gate domain_regression: {name} held-out success {value:.3f} fell more than "
                                f"{self.tolerance:g} below its best {best:.3f} at step {step}")
            self.best[name] = max(best if best is not None else value, float(value))
        return trip

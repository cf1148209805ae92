"""Rollout sources of the RL loop (`run/rl_loop.py`): where each step's groups of trajectories come from.

A source hands the loop one `StepRollouts` per step — the groups it selected for training, everything
it generated (selection's leftovers are stored, never trained), the tokens' entropies and its own
metrics — and receives every new policy version (`publish`). The loop, the RL step and the learner do
not know which source runs:

- `SyncSource` (`rl.mode: sync`): plays the step's tasks with the current policy, in the trainer's
  process, in a Ray actor (`run.backend: ray`) or through the gateway's external agent, with DAPO
  dynamic sampling when asked; the loop waits for it.
- `AsyncSource` (`rl.mode: async`, rollout/async_source.py): rollout workers generate ahead of the
  learner under the staleness bound η.

A multi-environment run (`envs:`) is a spec with a `play` method (`run/multienv.py` `EnvRouter`):
both sources play it, so each task runs in its own environment with its own budgets.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import torch

from tracerl.contract import Trajectory
from tracerl.rollout import run_episodes
from tracerl.rollout.engine_api import sleep_engine, sync_weights
from tracerl.rollout.group_seeds import GroupSeeds
from tracerl.tasks import next_groups


@dataclasses.dataclass
class StepRollouts:
    """One step's rollouts as a source hands them to the loop."""

    groups: list[list[Trajectory]]  # selected for training, by group
    generated: list[Trajectory]  # every trajectory of the step (the groups' and selection's leftovers)
    entropy: dict[str, list[float]]  # per-token entropy of each trajectory's ACTION tokens
    report: object  # tasks.SelectionReport of the step's draws
    selection: dict[str, float]  # the algorithm's group-selection counts
    rollout_s: float
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # the source's own (async/*)
    line: str = ""  # what the source adds to the step's one-line summary

    @property
    def trained(self) -> list[Trajectory]:
        return [t for g in self.groups for t in g]


def select(algo, groups: list[list[Trajectory]], group_size: int, generator) -> tuple[list[list[Trajectory]], dict]:
    """Each group through the algorithm's selection (e.g. resample-on-correct); the kept groups and the counts."""
    selection: dict[str, float] = {}
    out = []
    for group in groups:
        kept, rep = algo.select_group(group, group_size, generator)
        for k, v in rep.items():
            selection[k] = selection.get(k, 0.0) + v
        out.append([group[j] for j in kept])
    return out, selection


def tokens_left(recipe, state) -> bool:
    """True while the run's generated-token budget (`rl.max_generated_tokens`) is not spent."""
    cap = recipe.rl.max_generated_tokens
    return cap is None or state.generated_tokens < cap


def step_sampler(recipe, algo):
    """The stage's sampler settings, as dynamic sampling when the algorithm asks for it (DAPO)."""
    cfg = recipe.tasks.sampler
    return cfg.model_copy(update={"kind": "dynamic"}) if algo.dynamic_sampling and cfg.kind != "dynamic" else cfg


def play_fn(spec, episodes, budgets):
    """How a source plays a batch of tasks: an `envs:` router's own `play` in this process, else `episodes`
    (run_episodes, a Ray actor, the gateway) on the spec with the loop's budgets (a router's per env)."""
    if hasattr(spec, "play"):
        if episodes is run_episodes:
            return spec.play
        budgets = spec.player.budgets
    return lambda eng, *a, **kw: episodes(eng, spec, *a, budgets=budgets, **kw)


class SyncSource:
    """Rollouts played with the current policy, one step at a time (see the module docstring)."""

    def __init__(self, *, recipe, algo, engine, sampler, spec, state, budgets, astate, grader, episodes, tokenizer,
                 tokenizer_hashes):
        cfg = recipe.rl
        self.recipe, self.algorithm, self.engine, self.sampler = recipe, algo, engine, sampler
        self.state, self.astate, self.grader, self.tokenizer, self.hashes = state, astate, grader, tokenizer, tokenizer_hashes
        self.gen = torch.Generator().manual_seed(recipe.run.seed * 1000)
        if state.generator_state is not None:
            self.gen.set_state(state.generator_state)
        self.play, self.episodes = play_fn(spec, episodes, budgets), episodes
        self.n_roll = algo.rollouts_per_task(cfg.group_size)
        self.sampler_cfg = step_sampler(recipe, algo)

    def budget_left(self) -> bool:
        return tokens_left(self.recipe, self.state)

    def start(self, model) -> None:
        pass

    def next(self) -> StepRollouts:
        state, recipe, n_roll = self.state, self.recipe, self.n_roll
        t0 = time.time()
        rounds = itertools.count()
        generated: list[Trajectory] = []
        entropy: dict[str, list[float]] = {}
        selection: dict[str, float] = {}

        def rollout(tasks):
            if not tasks:
                return []
            r = next(rounds)
            batch = [t for t in tasks for _ in range(n_roll)]
            groups = [f"s{state.step}-p{i // n_roll}" + (f"-r{r}" if r else "") for i in range(len(batch))]
            seed = recipe.run.seed * 100003 + state.step + r * 7_000_003
            trajs = self.play(self.engine, batch, groups, sampling=recipe.sampling.model_dump(),
                              policy_version=state.policy_version, seed=seed, tokenizer_hashes=self.hashes,
                              generator=GroupSeeds(seed) if self.recipe.rollout.group_seeded else self.gen,
                              entropy_out=entropy)
            if self.grader is not None:  # before selection: dynamic sampling and advantages see the judged reward
                self.grader.apply(trajs, batch, self.tokenizer)
            generated.extend(trajs)
            state.generated_tokens += sum(t.num_action_tokens for t in trajs)
            by_group: dict[str, list[Trajectory]] = {}  # a gateway episode may split into several trajectories
            for t in trajs:
                by_group.setdefault(t.group_id, []).append(t)
            kept, counts = select(self.algorithm, [by_group.get(groups[i * n_roll], []) for i in range(len(tasks))],
                                  recipe.rl.group_size, self.astate.generator)
            for k, v in counts.items():
                selection[k] = selection.get(k, 0.0) + v
            return kept

        # dynamic sampling stops drawing once the token budget is spent
        got = next_groups(self.sampler_cfg, lambda k: self.sampler.next_batch(k) if self.budget_left() else [],
                          rollout, recipe.rl.prompts_per_step, rewards=lambda g: [t.reward for t in g])
        dyn = f" | groups {got.report.kept_groups}/{got.report.groups_generated}" if got.report.rounds > 1 else ""
        metrics = self.episodes.metrics() if hasattr(self.episodes, "metrics") else {}  # rollout workers' syncs
        return StepRollouts([g for _, g in got.groups], generated, entropy, got.report, selection, time.time() - t0,
                            metrics, line=dyn)

    def before_update(self) -> None:
        """The learner is about to update: an engine with a weight copy of its own frees it until `publish`."""
        sleep_engine(self.engine)

    def publish(self, model, version: int) -> bool:
        """The new version to the engine (one with its own weights copies them) and to the rollout workers
        (`rollout.workers`: by version, in buckets); True when the engine copied tensors."""
        if hasattr(self.episodes, "publish"):
            self.episodes.publish(model, version)
        return sync_weights(self.engine, model, version)

    def batch_metrics(self, batch, captured: dict) -> dict[str, float]:
        return {}

    def save(self) -> None:
        self.state.generator_state = self.gen.get_state()

    def finish(self, store) -> None:
        pass

    def close(self) -> None:
        pass

"""RL stages and their task pools: what the trainer draws from, and how it got there (docs/architecture.md, "The layout").

A run has one RL stage (`rl.steps`) or several (`rl.stages`). Each stage resolves its own recipe
(group size, prompts per step, length budget) and task config (sources, filters, sampler); unset
fields inherit from the previous stage. At the start of a stage its pool is built: sources are
loaded and validated, the filters run, and when the stage needs pass rates (a curriculum, the
all-pass / all-fail filters, or re-profiling after the first stage) and no profile file is given,
a seeded draw of `profile.tasks` training tasks is profiled under the current policy. The profile
is saved as `profiles/<stage>.json`, so a resumed run rebuilds the same pool without sampling again.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable
from pathlib import Path

from tracerl.config import Recipe
from tracerl.envs.base import get_env
from tracerl.errors import UserError
from tracerl.tasks import (DifficultyProfile, Ledger, LoadedSource, Sampler, TaskPool, TasksConfig, TaskSourceConfig,
                           UniformSampler, build_pool, make_sampler, profile)
from tracerl.tasks.profile import AttemptFn


@dataclasses.dataclass
class RLStage:
    """One resolved RL stage: global steps [start, end), its recipe and its task config."""

    index: int
    name: str
    start: int
    end: int
    recipe: Recipe
    tasks: TasksConfig
    reset_optimizer: bool = False
    reset_reference: bool = False

    def describe(self) -> dict:
        r = self.recipe
        return {"index": self.index, "name": self.name, "start_step": self.start, "end_step": self.end,
                "prompts_per_step": r.rl.prompts_per_step, "group_size": r.rl.group_size,
                "max_turns": r.env.max_turns, "max_tokens": r.env.max_tokens, "max_new_tokens": r.env.max_new_tokens,
                "sampler": r.tasks.sampler.kind, "reset_optimizer": self.reset_optimizer,
                "reset_reference": self.reset_reference}


def recipe_tasks(recipe: Recipe, cfg: TasksConfig | None = None, env=None) -> TasksConfig:
    """The task config with sources filled in: no sources means the env's train and held-out generators
    (`env`: an `EnvConfig`, default the recipe's)."""
    cfg = cfg or recipe.tasks
    if cfg.sources:
        return cfg
    env = env or recipe.env
    sources = [TaskSourceConfig(env=env.name, split="train", n=env.train_tasks, seed=recipe.run.seed,
                                difficulty=tuple(env.train_difficulty)),
               TaskSourceConfig(env=env.name, split="heldout", n=env.heldout_tasks, seed=recipe.run.seed,
                                difficulty=tuple(env.heldout_difficulty))]
    return cfg.model_copy(update={"sources": sources})


def rl_stages(recipe: Recipe) -> list[RLStage]:
    """The stages of the `rl` stage in order, each with its inherited settings resolved."""
    if not recipe.rl.stages:
        return [RLStage(0, "rl", 0, recipe.rl.steps, recipe, recipe_tasks(recipe))]
    out, start, current = [], 0, recipe
    for i, st in enumerate(recipe.rl.stages):
        rl = {k: getattr(st, k) for k in ("prompts_per_step", "group_size") if getattr(st, k) is not None}
        env = {k: getattr(st, k) for k in ("max_turns", "max_tokens", "max_new_tokens") if getattr(st, k) is not None}
        current = current.model_copy(update={"rl": current.rl.model_copy(update=rl),
                                             "env": current.env.model_copy(update=env),
                                             "tasks": st.tasks if st.tasks is not None else current.tasks})
        out.append(RLStage(i, st.name, start, start + st.steps, current, recipe_tasks(current),
                           st.reset_optimizer, st.reset_reference))
        start += st.steps
    return out


def _needs_profile(cfg: TasksConfig, reprofile: bool) -> bool:
    s = cfg.sampler
    curriculum = s.kind == "curriculum" or (s.kind == "dynamic" and s.dynamic.base == "curriculum")
    return curriculum or cfg.filters.all_pass or cfg.filters.all_fail or reprofile


def sampler_seed(recipe: Recipe, stage: RLStage) -> int:
    """Each (run seed, sampler seed, stage) has its own stream."""
    return zlib.crc32(f"{recipe.run.seed}:{stage.tasks.sampler.seed}:{stage.name}".encode())


@dataclasses.dataclass
class StageTasks:
    pool: TaskPool
    sampler: Sampler
    profile: DifficultyProfile | None
    profiled_here: bool  # sampled under the policy at this stage's start (not loaded from a file)


def build_stage_tasks(recipe: Recipe, stage: RLStage, *, run_path: Path,
                      attempt_fn: Callable[[], AttemptFn], policy: str,
                      loaded: tuple[list[TaskSourceConfig], list[LoadedSource]] | None = None) -> StageTasks:
    """Build the stage's pool and sampler; profile under the current policy when the stage needs it.

    `attempt_fn()` is called only when sampling is needed. `loaded`: source configs and the sources
    already loaded from them, reused when the stage has the same sources (nothing is loaded twice).
    """
    cfg = stage.tasks
    loaded = loaded[1] if loaded is not None and loaded[0] == cfg.sources else None
    reprofile = cfg.profile.reprofile_each_stage and stage.index > 0
    prof, profiled_here = None, False
    saved = run_path / "profiles" / f"{stage.name}.json"
    if cfg.profile.path:
        prof = DifficultyProfile.load(cfg.profile.path)
    elif _needs_profile(cfg, reprofile):
        if saved.exists():  # a resumed run: the stage was profiled before the interruption
            prof = DifficultyProfile.load(saved)
        else:
            if not cfg.profile.tasks:
                raise UserError(f"RL stage {stage.name!r} needs pass rates (curriculum, all-pass/all-fail filters or "
                                "re-profiling); set tasks.profile.path or tasks.profile.tasks (how many to profile)")
            unfiltered = build_pool(cfg.model_copy(update={"filters": cfg.filters.model_copy(
                update={"all_pass": False, "all_fail": False})}), sources=loaded, generator_of=get_env)
            n = min(cfg.profile.tasks, len(unfiltered.train))
            subset = UniformSampler(unfiltered.train, seed=sampler_seed(recipe, stage) + 1).next_batch(n)
            prof = profile(subset, attempt_fn(), cfg.profile.attempts, policy=policy)
            prof.meta.update({"stage": stage.name, "attempts_per_task": cfg.profile.attempts})
            saved.parent.mkdir(exist_ok=True)
            prof.save(saved)
            profiled_here = True
    filters = cfg.filters.model_copy(update={"all_pass": True}) if reprofile else cfg.filters
    pool = build_pool(cfg.model_copy(update={"filters": filters}), profile=prof, sources=loaded, generator_of=get_env)
    if prof is not None and not cfg.profile.path and cfg.profile.tasks:
        # the stage trains on the tasks it profiled (the others have no pass rate to select by)
        pool = dataclasses.replace(pool, kept=[t for t in pool.kept if t.split != "train" or t.id in prof])
    if not pool.train:
        raise UserError(f"RL stage {stage.name!r} has no training tasks left after filtering "
                        f"(discarded: {pool.ledger.counts()}); loosen tasks.filters")
    sampler_cfg = cfg.sampler.model_copy(update={"seed": sampler_seed(recipe, stage)})
    return StageTasks(pool, make_sampler(sampler_cfg, pool.train, prof), prof, profiled_here)


def write_ledger(path: Path, ledger: Ledger, stage: str) -> None:
    """Append the stage's discards (one JSON object per task, with its filter and reason)."""
    with open(path, "a") as f:
        f.writelines(json.dumps({"stage": stage, **dataclasses.asdict(r)}, sort_keys=True, default=str) + "\n" for r in ledger.records)

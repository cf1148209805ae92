"""From a `TasksConfig` to a filtered pool and a sampler: the one entry point the trainer needs.

    pool = build_pool(cfg.tasks)             # load + validate + filter, with ledger and manifest entries
    sampler = make_sampler(cfg.tasks.sampler, pool.train, pool.profile)
    batch = sampler.next_batch(prompts_per_step)
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Any

from tracerl.contract.task import Task, tasks_sha256
from tracerl.errors import UserError
from tracerl.config.tasks import FilterConfig, SamplerConfig, TasksConfig
from tracerl.tasks.filters import Ledger, apply_filters
from tracerl.tasks.profile import DifficultyProfile, difficulty_bucket
from tracerl.tasks.samplers import CurriculumSampler, MixtureSampler, Sampler, UniformSampler
from tracerl.tasks.schema import RowError
from tracerl.tasks.sources import GeneratorOf, LoadedSource, load_source, load_task_file

log = logging.getLogger("tracerl.tasks")


@dataclasses.dataclass
class TaskPool:
    """The tasks of a run before and after filtering, with everything the manifest and report need."""

    sources: list[LoadedSource]
    loaded: list[Task]
    kept: list[Task]
    ledger: Ledger
    profile: DifficultyProfile | None

    @property
    def train(self) -> list[Task]:
        return [t for t in self.kept if t.split == "train"]

    @property
    def heldout(self) -> list[Task]:
        return [t for t in self.kept if t.split == "heldout"]

    @property
    def row_errors(self) -> list[RowError]:
        return [e for s in self.sources for e in s.errors]

    def manifest(self) -> dict[str, Any]:
        return {"sources": [s.manifest_entry() for s in self.sources], "pool_sha256": tasks_sha256(self.kept),
                "num_loaded": len(self.loaded), "num_kept": len(self.kept), "discarded": self.ledger.counts(),
                "num_bad_rows": len(self.row_errors)}


def _check_unique_ids(tasks: list[Task]) -> None:
    seen: dict[str, Task] = {}
    for t in tasks:
        if t.id in seen:
            first = seen[t.id]
            raise UserError(f"task id {t.id!r} appears in sources {first.source!r} ({first.split}) and "
                            f"{t.source!r} ({t.split}); ids must be unique across a run's sources (prefix them)")
        seen[t.id] = t


def load_eval_sets(paths: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Evaluation sets for decontamination: name -> (item id, prompt text). A bad row there is an error,
    because an unreadable evaluation item is one that contamination cannot be checked against."""
    out = {}
    for path in paths:
        src = load_task_file(path, license="unknown", split="heldout")
        if src.errors:
            raise UserError(f"evaluation set {path!r} has {len(src.errors)} bad rows (first: {src.errors[0]}); "
                            "fix them so that decontamination sees every item")
        out[src.name] = [(t.id, t.prompt_text()) for t in src.tasks]
    return out


def filter_tasks(tasks: list[Task], filters: FilterConfig, prof: DifficultyProfile | None):
    return apply_filters(tasks, filters, profile=prof, eval_sets=load_eval_sets(filters.eval_sets))


def build_pool(cfg: TasksConfig, *, profile: DifficultyProfile | None = None,
               sources: list[LoadedSource] | None = None, generator_of: GeneratorOf | None = None) -> TaskPool:
    """Load every source, report bad rows, apply the filters; `profile` overrides `cfg.profile.path`.

    `sources`: the already loaded sources of `cfg.sources` (a pool built again with other filters).
    `generator_of`: an environment's name -> its generator (`tracerl.envs.base.get_env`), for
    generator sources.
    """
    if not cfg.sources:
        raise UserError("the task config lists no sources; add a task file or a generator under tasks.sources")
    if sources is None:
        sources = [load_source(s, generator_of=generator_of) for s in cfg.sources]
        for s in sources:
            for err in s.errors:
                log.warning("bad task row: %s", err)
    loaded = [t for s in sources for t in s.tasks]
    _check_unique_ids(loaded)
    if profile is None and cfg.profile.path:
        profile = DifficultyProfile.load(cfg.profile.path)
    result = filter_tasks(loaded, cfg.filters, profile)
    return TaskPool(sources, loaded, result.kept, result.ledger, profile)


def make_sampler(cfg: SamplerConfig, tasks: list[Task], prof: DifficultyProfile | None = None) -> Sampler:
    """The sampler that proposes tasks; for kind=dynamic it is the base sampler that dynamic sampling draws from."""
    kind = cfg.dynamic.base if cfg.kind == "dynamic" else cfg.kind
    try:
        if kind == "uniform":
            return UniformSampler(tasks, seed=cfg.seed)
        if kind == "mixture":
            return MixtureSampler(tasks, cfg.weights, seed=cfg.seed)
        if prof is None:
            raise UserError("the curriculum sampler needs a difficulty profile; set tasks.profile.path "
                            "(write one with `tracerl tasks profile`)")
        return CurriculumSampler(tasks, prof, cfg.curriculum, cfg.weights, seed=cfg.seed)
    except ValueError as err:
        raise UserError(f"cannot build the {kind} sampler: {err}") from None


def distribution(tasks: list[Task], prof: DifficultyProfile | None) -> dict[str, Counter]:
    """source -> Counter of difficulty buckets (pass-rate band, declared difficulty, or unknown)."""
    out: dict[str, Counter] = {}
    for t in tasks:
        out.setdefault(f"{t.source} [{t.split}]", Counter())[difficulty_bucket(t, prof)] += 1
    return out


def format_distributions(before: dict[str, Counter], after: dict[str, Counter]) -> str:
    """A plain table: one row per (source, bucket) with counts before and after filtering."""
    lines = [f"{'source':<28} {'bucket':<22} {'before':>7} {'after':>7}"]
    for source in sorted(set(before) | set(after)):
        b, a = before.get(source, Counter()), after.get(source, Counter())
        for bucket in sorted(set(b) | set(a)):
            lines.append(f"{source:<28} {bucket:<22} {b[bucket]:>7} {a[bucket]:>7}")
        lines.append(f"{source:<28} {'total':<22} {sum(b.values()):>7} {sum(a.values()):>7}")
    return "\n".join(lines)


def format_source_shares(before: list[Task], after: list[Task], weights: dict[str, float]) -> str:
    """Each source's share of the training pool before and after filtering, next to its target weight."""
    b = Counter(t.source for t in before if t.split == "train")
    a = Counter(t.source for t in after if t.split == "train")
    total_w = sum(weights.values())
    nb, na = sum(b.values()) or 1, sum(a.values()) or 1
    lines = [f"{'source':<28} {'target':>7} {'share before':>13} {'share after':>12}"]
    for s in sorted(set(b) | set(a) | set(weights)):
        target = f"{weights[s] / total_w:.3f}" if s in weights else "-"
        lines.append(f"{s:<28} {target:>7} {b[s] / nb:>13.3f} {a[s] / na:>12.3f}")
    return "\n".join(lines)

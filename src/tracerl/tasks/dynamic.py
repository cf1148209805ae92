"""Policy-adaptive selection: DAPO dynamic sampling and per-stage re-profiling (Skywork-OR1).

A group whose rewards are all equal gives GRPO-style estimators no relative signal. Dynamic
sampling keeps generating groups until the batch holds enough groups with non-zero reward
variance; it costs extra generation, which the report states. Departure from DAPO: instead of
regenerating a whole batch per round, each round draws only the expected shortfall
(deficit / keep rate so far, at most one batch), and the number of rounds is capped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from tracerl.contract.task import Task
from tracerl.config.tasks import SamplerConfig
from tracerl.tasks.filters import Discard
from tracerl.tasks.profile import AttemptFn, DifficultyProfile, profile

G = TypeVar("G")


@dataclasses.dataclass
class DynamicReport:
    """What dynamic sampling did for one batch and what it cost."""

    target_groups: int
    kept_groups: int = 0
    rounds: int = 0
    groups_generated: int = 0
    rollouts_generated: int = 0
    zero_variance_groups: dict[str, int] = dataclasses.field(default_factory=dict)  # reward -> all-equal groups seen
    surplus_groups: int = 0  # mixed groups generated beyond the target and not used
    padded_groups: int = 0
    cost: float = 0.0  # sum of `cost(group)` over every generated group (e.g. generated tokens)
    cost_kept: float = 0.0

    @property
    def filled(self) -> bool:
        return self.kept_groups >= self.target_groups

    @property
    def oversampling(self) -> float:
        """Groups generated per group wanted (1.0 means no extra cost)."""
        return self.groups_generated / self.target_groups if self.target_groups else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "filled": self.filled, "oversampling": self.oversampling}


@dataclasses.dataclass
class DynamicBatch(Generic[G]):
    groups: list[tuple[Task, G]]
    report: DynamicReport


def has_variance(rewards: Sequence[float]) -> bool:
    """DAPO's rule (the registered `dynamic_sampling` selection): a group is kept when its rewards differ."""
    import torch

    from tracerl.algorithms.selection import dynamic_sampling

    if len(rewards) < 2:
        return False
    keep, _ = dynamic_sampling(torch.tensor(list(rewards), dtype=torch.float64), [0] * len(rewards))
    return bool(keep.all())


def dynamic_sample(draw: Callable[[int], list[Task]], rollout: Callable[[list[Task]], Sequence[G]], target_groups: int,
                   *, max_rounds: int = 4, rewards: Callable[[G], Sequence[float]] = lambda g: g,
                   cost: Callable[[G], float] | None = None, pad_with_zero_variance: bool = False) -> DynamicBatch[G]:
    """Draw tasks and roll out groups until `target_groups` groups have non-zero reward variance.

    draw(k) returns the next k tasks of a sampler; rollout(tasks) returns one group per task (any
    object; `rewards(group)` gives its rewards). The batch is returned short when `max_rounds` runs
    out, or filled with zero-variance groups if `pad_with_zero_variance`. Groups come back in draw order.
    """
    if target_groups < 1:
        raise ValueError(f"target_groups must be at least 1, got {target_groups}")
    report = DynamicReport(target_groups)
    kept: list[tuple[Task, G]] = []
    flat: list[tuple[Task, G]] = []
    while report.rounds < max_rounds and len(kept) < target_groups:
        deficit = target_groups - len(kept)
        keep_rate = len(kept) / report.groups_generated if report.groups_generated else 1.0
        size = min(target_groups, math.ceil(deficit / keep_rate) if keep_rate > 0 else target_groups)
        tasks = draw(size)
        groups = list(rollout(tasks))
        if len(groups) != len(tasks):
            raise ValueError(f"rollout returned {len(groups)} groups for {len(tasks)} tasks")
        report.rounds += 1
        for task, group in zip(tasks, groups):
            r = list(rewards(group))
            report.groups_generated += 1
            report.rollouts_generated += len(r)
            c = float(cost(group)) if cost is not None else 0.0
            report.cost += c
            if has_variance(r):
                if len(kept) < target_groups:
                    kept.append((task, group))
                    report.cost_kept += c
                else:
                    report.surplus_groups += 1
            else:
                key = f"{r[0]:g}" if r else "empty"
                report.zero_variance_groups[key] = report.zero_variance_groups.get(key, 0) + 1
                flat.append((task, group))
    if pad_with_zero_variance and len(kept) < target_groups:
        pad = flat[:target_groups - len(kept)]
        report.padded_groups = len(pad)
        kept.extend(pad)
    report.kept_groups = len(kept)
    return DynamicBatch(kept, report)


def next_groups(cfg: SamplerConfig, draw: Callable[[int], list[Task]], rollout: Callable[[list[Task]], Sequence[G]],
                n: int, *, rewards: Callable[[G], Sequence[float]] = lambda g: g,
                cost: Callable[[G], float] | None = None) -> DynamicBatch[G]:
    """One step's groups for any sampler kind: dynamic sampling when `cfg.kind == "dynamic"`, else
    exactly `n` drawn tasks rolled out once (the report then only counts what was generated)."""
    if cfg.kind == "dynamic":
        return dynamic_sample(draw, rollout, n, max_rounds=cfg.dynamic.max_rounds, rewards=rewards, cost=cost,
                              pad_with_zero_variance=cfg.dynamic.pad_with_zero_variance)
    tasks = draw(n)
    groups = list(rollout(tasks))
    report = DynamicReport(n, kept_groups=len(groups), rounds=1, groups_generated=len(groups))
    for g in groups:
        r = list(rewards(g))
        report.rollouts_generated += len(r)
        report.cost += float(cost(g)) if cost is not None else 0.0
        if not has_variance(r):
            key = f"{r[0]:g}" if r else "empty"
            report.zero_variance_groups[key] = report.zero_variance_groups.get(key, 0) + 1  # counted, kept
    report.cost_kept = report.cost
    return DynamicBatch(list(zip(tasks, groups)), report)


def reprofile_stage(tasks: list[Task], attempt_fn: AttemptFn, n: int, *, stage: str, threshold: float = 1.0,
                    policy: str = "") -> tuple[list[Task], list[Discard], DifficultyProfile]:
    """Profile the training tasks under the current policy and drop those that became all-pass.

    Run at the start of every RL stage after the first (Skywork-OR1: "prompts solved by all sampled
    trajectories under the previous actor are removed"). Held-out tasks are neither profiled nor removed.
    """
    train = [t for t in tasks if t.split == "train"]
    prof = profile(train, attempt_fn, n, policy=policy)
    discards: list[Discard] = []
    drop: set[str] = set()
    for t in train:
        e = prof.get(t.id)
        if e.pass_rate >= threshold:
            drop.add(t.id)
            discards.append(Discard(t.id, t.source, "all_pass", f"newly all-pass before stage {stage!r}: solved "
                                    f"{e.successes} of {e.attempts}", {"stage": stage, "successes": e.successes,
                                                                      "attempts": e.attempts}))
    kept = [t for t in tasks if t.split != "train" or t.id not in drop]
    return kept, discards, prof

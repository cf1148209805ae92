"""Samplers draw the next batch of training tasks; their state goes into the checkpoint.

Every sampler's randomness is a function of `(seed, counters)` kept in `state_dict()`, so a run
resumed from a checkpoint draws exactly the batch the uninterrupted run would have drawn. A state
saved for one pool refuses to load into another (the pool's ordered ids are fingerprinted).
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from tracerl.contract.task import Task
from tracerl.config.tasks import CurriculumConfig
from tracerl.tasks.profile import DifficultyProfile


class Sampler(Protocol):
    def next_batch(self, n: int) -> list[Task]: ...

    def metrics(self) -> dict[str, float]:
        """What the sampler did so far, as `tasks/*` metrics (the trainer logs them each step)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


def pool_fingerprint(tasks: list[Task]) -> str:
    return hashlib.sha256("\n".join(f"{t.source}/{t.id}" for t in tasks).encode()).hexdigest()[:16]


def _check_pool(state: Mapping[str, Any], expected: str, kind: str) -> None:
    if state.get("kind") != kind:
        raise ValueError(f"sampler state is for a {state.get('kind')!r} sampler, not {kind!r}")
    if state.get("pool") != expected:
        raise ValueError("sampler state was saved for a different task pool (sources or filters changed since)")


def _train_only(tasks: list[Task]) -> list[Task]:
    train = [t for t in tasks if t.split == "train"]
    if not train:
        raise ValueError("the task pool has no training tasks left to sample")
    return train


class UniformSampler:
    """Each epoch is a fresh permutation of the pool drawn from (seed, epoch): every task once per epoch."""

    kind = "uniform"

    def __init__(self, tasks: list[Task], seed: int = 0):
        self.tasks = _train_only(tasks)
        self.seed = seed
        self.epoch = 0
        self.cursor = 0
        self._pool = pool_fingerprint(self.tasks)
        self._perm = self._permutation()

    def _permutation(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.tasks))

    def next_batch(self, n: int) -> list[Task]:
        out = []
        while len(out) < n:
            if self.cursor == len(self.tasks):
                self.epoch, self.cursor = self.epoch + 1, 0
                self._perm = self._permutation()
            take = min(n - len(out), len(self.tasks) - self.cursor)
            out.extend(self.tasks[i] for i in self._perm[self.cursor:self.cursor + take])
            self.cursor += take
        return out

    def metrics(self) -> dict[str, float]:
        return {"tasks/epoch": float(self.epoch)}

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "pool": self._pool, "seed": self.seed, "epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_pool(state, self._pool, self.kind)
        self.seed, self.epoch, self.cursor = int(state["seed"]), int(state["epoch"]), int(state["cursor"])
        self._perm = self._permutation()


def _by_source(tasks: list[Task]) -> dict[str, list[Task]]:
    out: dict[str, list[Task]] = {}
    for t in tasks:
        out.setdefault(t.source, []).append(t)
    return out


def _target_weights(weights: Mapping[str, float], groups: Mapping[str, list[Task]]) -> dict[str, float]:
    """Normalized targets; empty `weights` means each source's share of the pool."""
    raw = dict(weights) if weights else {s: float(len(ts)) for s, ts in groups.items()}
    total = sum(raw.values())
    return {s: w / total for s, w in sorted(raw.items())}


def allocate(n: int, weights: Mapping[str, float], credit: dict[str, float]) -> dict[str, int]:
    """Split n draws among sources so that cumulative counts track n·weight (largest remainder, carried).

    `credit` carries each source's fractional entitlement between batches and is updated in place,
    so over many batches the drawn shares converge to the weights with error below one draw.
    """
    total = sum(weights.values())
    for s, w in weights.items():
        credit[s] = credit.get(s, 0.0) + n * w / total
    counts = {s: max(0, math.floor(credit[s])) for s in weights}
    short = n - sum(counts.values())
    by_remainder = sorted(weights, key=lambda s: (-(credit[s] - counts[s]), s))
    for s in by_remainder[:max(short, 0)]:
        counts[s] += 1
    for s in weights:
        credit[s] -= counts[s]
    return counts


class MixtureSampler:
    """Per-source mixture with target weights; each source is drawn uniformly (epoch permutations).

    A source whose tasks were all filtered out keeps its target in the report but cannot be drawn:
    the others are renormalized, and `report()` shows the drift next to the target.
    """

    kind = "mixture"

    def __init__(self, tasks: list[Task], weights: Mapping[str, float] | None = None, seed: int = 0):
        self.tasks = _train_only(tasks)
        self.groups = _by_source(self.tasks)
        self.targets = _target_weights(weights or {}, self.groups)
        self.drawable = {s: w for s, w in self.targets.items() if s in self.groups and w > 0}
        if not self.drawable:
            raise ValueError(f"no source with a positive weight has tasks; targets {self.targets}, pool {sorted(self.groups)}")
        self.streams = {s: UniformSampler(ts, seed=zlib.crc32(f"{seed}:{s}".encode())) for s, ts in self.groups.items()}
        self.credit: dict[str, float] = {}
        self.drawn: dict[str, int] = {s: 0 for s in self.groups}
        self._pool = pool_fingerprint(self.tasks)

    def next_batch(self, n: int) -> list[Task]:
        counts = allocate(n, self.drawable, self.credit)
        out: list[Task] = []
        for s in sorted(counts):
            out.extend(self.streams[s].next_batch(counts[s]) if counts[s] else [])
            self.drawn[s] += counts[s]
        return out

    def report(self) -> list[dict[str, Any]]:
        """Per source: target weight, share of the filtered pool, and share of what was drawn so far."""
        total_drawn = sum(self.drawn.values()) or 1
        sources = sorted(set(self.targets) | set(self.groups))
        return [{"source": s, "target": self.targets.get(s, 0.0), "pool_tasks": len(self.groups.get(s, [])),
                 "pool_share": len(self.groups.get(s, [])) / len(self.tasks), "drawn": self.drawn.get(s, 0),
                 "observed": self.drawn.get(s, 0) / total_drawn} for s in sources]

    def metrics(self) -> dict[str, float]:
        """Observed share of each source next to its target."""
        out = {}
        for row in self.report():
            out[f"tasks/share/{row['source']}"] = row["observed"]
            out[f"tasks/target/{row['source']}"] = row["target"]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "pool": self._pool, "credit": dict(self.credit), "drawn": dict(self.drawn),
                "streams": {s: st.state_dict() for s, st in self.streams.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_pool(state, self._pool, self.kind)
        self.credit = {s: float(v) for s, v in state["credit"].items()}
        self.drawn = {s: int(v) for s, v in state["drawn"].items()}
        for s, st in state["streams"].items():
            self.streams[s].load_state_dict(st)


class CurriculumSampler:
    """Pass-rate curriculum: a Gaussian over pass rate whose mean moves linearly from easy to hard.

    Within each source, task i is drawn with probability ∝ exp(−(p_i − μ_t)² / 2σ²), where p_i is its
    profiled pass rate and μ_t = mean_start + (mean_end − mean_start)·min(t / steps, 1) at batch t.
    Sources get fixed shares of each batch (`allocate`), so the domain ratio holds while difficulty
    moves (Nemotron's per-domain Gaussian curriculum). Tasks are drawn without replacement within
    a batch when the source has enough of them.
    """

    kind = "curriculum"

    def __init__(self, tasks: list[Task], profile: DifficultyProfile | None, cfg: CurriculumConfig | None = None,
                 weights: Mapping[str, float] | None = None, seed: int = 0):
        self.cfg = cfg or CurriculumConfig()
        self.tasks = _train_only(tasks)
        self.groups = _by_source(self.tasks)
        self.targets = _target_weights(weights or {}, self.groups)
        self.drawable = {s: w for s, w in self.targets.items() if s in self.groups and w > 0}
        if not self.drawable:
            raise ValueError(f"no source with a positive weight has tasks; targets {self.targets}, pool {sorted(self.groups)}")
        prof = profile or DifficultyProfile()
        self.unprofiled = sum(1 for t in self.tasks if prof.pass_rate(t.id) is None)
        self.pass_rates = {s: np.array([prof.pass_rate(t.id, self.cfg.unprofiled_pass_rate) for t in ts])
                           for s, ts in self.groups.items()}
        self.seed = seed
        self.step = 0
        self.credit: dict[str, float] = {}
        self._pool = pool_fingerprint(self.tasks)

    def mean_at(self, step: int) -> float:
        c = self.cfg
        f = min(step / c.steps, 1.0)
        return c.mean_start * (1.0 - f) + c.mean_end * f

    def probabilities(self, source: str, step: int) -> np.ndarray:
        logits = -((self.pass_rates[source] - self.mean_at(step)) ** 2) / (2 * self.cfg.std ** 2)
        w = np.exp(logits - logits.max())
        return w / w.sum()

    def next_batch(self, n: int) -> list[Task]:
        rng = np.random.default_rng([self.seed, self.step])
        counts = allocate(n, self.drawable, self.credit)
        out: list[Task] = []
        for s in sorted(counts):
            k = counts[s]
            if not k:
                continue
            p = self.probabilities(s, self.step)
            idx = rng.choice(len(p), size=k, replace=k > int((p > 0).sum()), p=p)
            out.extend(self.groups[s][i] for i in idx)
        self.step += 1
        return out

    def metrics(self) -> dict[str, float]:
        """The target pass rate of the batch just drawn."""
        return {"tasks/curriculum_mean": self.mean_at(max(self.step - 1, 0))}

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "pool": self._pool, "seed": self.seed, "step": self.step, "credit": dict(self.credit)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_pool(state, self._pool, self.kind)
        self.seed, self.step = int(state["seed"]), int(state["step"])
        self.credit = {s: float(v) for s, v in state["credit"].items()}

"""A pool of rollout workers: versioned weights out, jobs out, results back; dead workers replaced.

The learner talks only to the pool. `publish` sends one version of the weights to every worker,
`submit` gives a job to the least loaded one, `poll` collects what finished. A worker that died
(its process exited, e.g. killed by its pid) is detected in `poll`: it is replaced by a fresh one
(loaded with the latest weights), and each job it held is re-issued once (`retried`) or, when it
already was a retry, excluded (`excluded`); both are counted and never silently lost.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from tracerl.rollout.workers import RolloutJob, RolloutResult, RolloutWorker, validated


@dataclasses.dataclass
class PoolCounters:
    worker_deaths: int = 0
    jobs_retried: int = 0
    jobs_excluded: int = 0
    worker_idle_s: float = 0.0  # summed over the results received
    worker_busy_s: float = 0.0

    def as_metrics(self) -> dict[str, float]:
        return {f"async/{k}": float(v) for k, v in dataclasses.asdict(self).items()}


class WorkerPool:
    """`factory(worker_id, incarnation)` makes a worker; incarnation counts its replacements."""

    def __init__(self, factory: Callable[[int, int], RolloutWorker], n: int, *, per_worker: int = 2,
                 max_replacements: int | None = None, full_weights: Callable[[], tuple] | None = None):
        self.factory, self.per_worker = factory, per_worker
        self.full_weights = full_weights  # () -> (version, full weights): a replaced worker's first load
        self.max_replacements = 3 * n if max_replacements is None else max_replacements
        self.incarnation = [0] * n
        self.workers: list[RolloutWorker] = [factory(i, 0) for i in range(n)]
        self.assigned: dict[int, tuple[int, RolloutJob]] = {}  # job id -> (worker id, job)
        self.started: dict[int, int] = {}  # job id -> version it started at
        self.counters = PoolCounters()
        self.weights: tuple[int, bytes] | None = None
        self.excluded: list[RolloutJob] = []

    def publish(self, version: int, blob) -> None:
        self.weights = (version, blob)
        for w in self.workers:
            w.send_weights(version, blob)

    def load(self) -> list[int]:
        return [sum(1 for wid, _ in self.assigned.values() if wid == w.worker_id) for w in self.workers]

    def has_capacity(self) -> bool:
        return min(self.load()) < self.per_worker

    def submit(self, job: RolloutJob) -> None:
        load = self.load()
        wid = load.index(min(load))
        self.assigned[job.job_id] = (wid, job)
        self.workers[wid].submit(job)

    @property
    def in_flight(self) -> int:
        return len(self.assigned)

    def poll(self, timeout: float = 0.0) -> list[RolloutResult]:
        """Finished results (validated), after replacing any dead worker."""
        out: list[RolloutResult] = []
        deadline = time.time() + timeout
        while True:
            for w in list(self.workers):
                for ev in w.events(0.0):
                    if ev[0] == "started":
                        self.started[ev[2]] = ev[3]
                    elif ev[0] == "done" and ev[1].job_id in self.assigned:
                        res = validated(ev[1])
                        del self.assigned[res.job_id]
                        self.counters.worker_idle_s += res.idle_s
                        self.counters.worker_busy_s += res.busy_s
                        out.append(res)
                if not w.alive():
                    self._replace(w.worker_id)
            if out or time.time() >= deadline:
                return out
            time.sleep(0.005)

    def _replace(self, wid: int) -> None:
        self.counters.worker_deaths += 1
        if self.counters.worker_deaths > self.max_replacements:  # a worker that cannot start: stop, do not loop
            raise RuntimeError(f"rollout workers died {self.counters.worker_deaths} times (the last, worker {wid}, "
                               f"with exit code {getattr(getattr(self.workers[wid], 'proc', None), 'exitcode', '?')}); "
                               "see its traceback above")
        self.workers[wid].close()
        self.incarnation[wid] += 1
        self.workers[wid] = self.factory(wid, self.incarnation[wid])
        if self.weights is not None:  # the full weights when the last sync carried adapters only
            full = getattr(self.weights[1], "kind", "full") != "full" and self.full_weights is not None
            self.workers[wid].send_weights(*(self.full_weights() if full else self.weights))
        lost = [job for jid, (w, job) in self.assigned.items() if w == wid]
        for job in lost:
            del self.assigned[job.job_id]
            self.started.pop(job.job_id, None)
            if job.attempt == 0:
                self.counters.jobs_retried += 1
                self.submit(dataclasses.replace(job, attempt=1))
            else:
                self.counters.jobs_excluded += 1
                self.excluded.append(job)

    def outstanding(self) -> list[RolloutJob]:
        """Jobs submitted and not returned, in job order (a checkpoint records them to restart)."""
        return [job for _, (_, job) in sorted(self.assigned.items())]

    def close(self) -> None:
        for w in self.workers:
            w.close()

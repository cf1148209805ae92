"""Data-parallel rollouts for the sync loop (`rollout.workers: N`): a step's groups split across N engine workers.

`ParallelEpisodes` is what the sync source plays with (`run_episodes`' signature). Each call cuts the step's
rows into N shares of whole groups (contiguous, sizes differing by at most one group), sends each share to
its worker as one job seeded per group (`rollout.seeding: group`, rollout/group_seeds.py), and puts the
trajectories back in the call's row order: with the same seed the tokens are those of one worker, whatever N.

Workers are spawned processes (`run.backend: local`, rollout/workers.py `ProcessWorker`) or Ray actors
(`run.backend: ray`, rollout/ray_worker.py). Weights go to every worker by version (`publish`, right after
each update, or before a call that finds a worker behind), in buckets (rollout/weight_sync.py); each worker
acknowledges the version it loaded, and the seconds and MiB from send to the last acknowledgement are the
metrics `rollout/weight_sync_s` / `rollout/weight_sync_mb`. A LoRA policy sends only its adapters after the
first sync. With `rollout.weight_sync: broadcast` the weights go over a `torch.distributed` group of the driver
and every worker instead (rollout/broadcast_sync.py: formed at the first sync, formed again when a worker is
replaced; a sync then reaches every worker, full weights for all when one holds none). A worker that dies (process killed, actor killed) is replaced by a fresh one, loaded with the
current weights, and its job re-run with the same seeds: the same tokens (tests/rollout/test_rollout_workers.py).
"""

from __future__ import annotations

import dataclasses
import time

from tracerl.rollout.weight_sync import SyncMeter, payload
from tracerl.rollout.workers import RolloutJob, validated


def adapters_suffice(model) -> bool:
    """A LoRA policy whose only trainable tensors are its adapters: a sync after the first sends only those."""
    from tracerl.models.lora import is_lora

    return is_lora(model) and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)


def group_shares(group_ids: list[str], n: int) -> list[tuple[int, int]]:
    """Row ranges [a, b) of N shares of whole groups (consecutive rows with one group id), in order; the first
    shares take one group more when they do not divide evenly (an empty share is (a, a))."""
    starts = [i for i, g in enumerate(group_ids) if i == 0 or g != group_ids[i - 1]] + [len(group_ids)]
    groups = len(starts) - 1
    out, g0 = [], 0
    for w in range(n):
        g1 = g0 + groups // n + (1 if w < groups % n else 0)
        out.append((starts[g0], starts[g1]))
        g0 = g1
    return out


class ParallelEpisodes:
    """`run_episodes` over N workers made by `factory(worker_id, incarnation)` (see the module docstring)."""

    def __init__(self, factory, model, n: int, *, env_name: str, store=None, bucket_mb: float = 64.0,
                 max_replacements: int | None = None, sender=None):
        self.factory, self.model, self.n, self.env_name, self.store = factory, model, n, env_name, store
        self.bucket_mb = bucket_mb
        self.sender = sender  # a BroadcastSender (rollout.weight_sync: broadcast), else each worker's own transport
        self.max_replacements = 3 * n if max_replacements is None else max_replacements
        self.workers: list = [None] * n
        self.incarnation = [0] * n
        self.sent: list[int | None] = [None] * n  # the version each worker holds
        self.jobs = 0
        self.meter = SyncMeter()
        self.start_s = 0.0  # start-up of new workers up to their first weights (not counted as sync time)
        self.counters = {"worker_deaths": 0, "jobs_retried": 0}
        self._made: dict[str, tuple] = {}  # kind -> (version, payload): built once per version, sent to every worker

    # ---- weights -------------------------------------------------------------------------------------------
    def _payload_for(self, i: int, version: int):
        """Full weights for a worker that holds none; adapters only for the others when the policy is LoRA."""
        kind = "lora" if self.sent[i] is not None and adapters_suffice(self.model) else "full"
        if self._made.get(kind, (None,))[0] != version:
            self._made[kind] = (version, payload(self.model, version, self.bucket_mb, adapters_only=kind == "lora"))
        return self._made[kind][1]

    def publish(self, model, version: int) -> None:
        """Every worker to `version` (after an update); timed from send to the last worker's acknowledgement."""
        self.model = model
        if any(w is not None for w in self.workers):
            self._sync(version)

    def _sync(self, version: int) -> None:
        behind = [i for i in range(self.n) if self.workers[i] is not None and self.sent[i] != version]
        if not behind:
            return
        t0 = time.perf_counter()
        fresh = any(self.sent[i] is None for i in behind)  # a new worker's first load waits for its start-up too
        mb = self._broadcast(version) if self.sender is not None else sum(self._send(i, version) for i in behind)
        self._await_loaded(behind, version)
        if fresh:
            self.start_s += time.perf_counter() - t0
        else:
            self.meter.s += time.perf_counter() - t0
            self.meter.mb += mb
            self.meter.n += 1

    def _send(self, i: int, version: int) -> float:
        p = self._payload_for(i, version)
        self.workers[i].send_weights(version, p)
        self.sent[i] = version
        return p.mb

    def _broadcast(self, version: int) -> float:
        """`version` to every worker over the broadcast group (re-formed if a worker changed; full weights for all
        when one holds none); MiB summed over the workers, as the other transports count them."""
        while True:
            lora = all(v is not None for v in self.sent) and adapters_suffice(self.model)
            try:
                p = self.sender.sync(list(self.workers), self.model, version, self.bucket_mb, adapters_only=lora)
                break
            except RuntimeError:  # a member died during the broadcast: replace it, form the group again
                dead = [i for i, w in enumerate(self.workers) if not w.alive()]
                if not dead:
                    raise
                for i in dead:
                    self._replace(i, None)
        self.sent = [version] * self.n
        return p.mb * self.n

    def _resend(self, i: int, version: int) -> None:
        """A replaced worker to `version`: over the re-formed group, or through its own transport."""
        if self.sender is not None:
            self._broadcast(version)
        else:
            self._send(i, version)

    def _await_loaded(self, rows: list[int], version: int) -> None:
        waiting = set(rows)
        while waiting:
            for i in list(waiting):
                w = self.workers[i]
                for ev in w.events(0.01):
                    if ev[0] == "loaded" and ev[2] == version:
                        waiting.discard(i)
                if i in waiting and not w.alive():
                    self._replace(i, None)
                    self._resend(i, version)

    # ---- rollouts ------------------------------------------------------------------------------------------
    def __call__(self, engine, spec, tasks, group_ids, *, budgets, sampling, policy_version: int, seed: int,
                 tokenizer_hashes=None, generator=None, entropy_out=None, **kw):
        if kw:
            raise TypeError(f"ParallelEpisodes does not take {sorted(kw)}")
        if not set(spec.name.split("+")) <= set(self.env_name.split("+")):
            raise ValueError(f"the rollout workers play env {self.env_name!r}, not {spec.name!r}")
        if generator is not None and not hasattr(generator, "for_rows"):
            raise ValueError("rollout workers sample each group from its own generator: pass a GroupSeeds")
        base = generator.seed if generator is not None else seed
        for i in range(self.n):
            if self.workers[i] is None:
                self.workers[i] = self.factory(i, self.incarnation[i])
        self._sync(policy_version)
        jobs: dict[int, tuple[int, int, RolloutJob]] = {}
        for i, (a, b) in enumerate(group_shares(list(group_ids), self.n)):
            if b > a:
                job = RolloutJob(self.jobs, list(tasks[a:b]), list(group_ids[a:b]), base, budgets, dict(sampling),
                                 group_seeds=True)
                self.jobs += 1
                jobs[i] = (a, b, job)
                self.workers[i].submit(job)
        results = self._collect(jobs, policy_version)
        out = []
        for i in sorted(results):
            out += results[i].trajectories
            if entropy_out is not None:
                entropy_out.update(results[i].entropy)
        return out

    def _collect(self, jobs: dict, version: int) -> dict:
        results: dict = {}
        while len(results) < len(jobs):
            for i, (_, _, job) in jobs.items():
                if i in results:
                    continue
                w = self.workers[i]
                for ev in w.events(0.02):
                    if ev[0] == "done" and ev[1].job_id == job.job_id:
                        results[i] = validated(ev[1])
                if i not in results and not w.alive():
                    job = dataclasses.replace(job, attempt=job.attempt + 1)
                    jobs[i] = (jobs[i][0], jobs[i][1], job)
                    self._replace(i, job)
                    self.counters["jobs_retried"] += 1
                    self._resend(i, version)
                    self.workers[i].submit(job)
        return results

    def _replace(self, i: int, job: RolloutJob | None) -> None:
        self.counters["worker_deaths"] += 1
        n = self.counters["worker_deaths"]
        if self.store is not None:
            self.store.add_event("rollout_worker_died", f"rollout worker {i} died" + (
                f" during job {job.job_id}; its groups re-run with the same seeds on a new worker" if job else ""),
                stage="rl", payload={"worker": i, "job": job.job_id if job else None,
                                     "incarnation": self.incarnation[i], **self.counters})
        if n > self.max_replacements:
            raise RuntimeError(f"rollout workers died {n} times (the last, worker {i}); see its traceback above")
        self.workers[i].close()
        self.incarnation[i] += 1
        self.workers[i] = self.factory(i, self.incarnation[i])
        self.sent[i] = None

    def metrics(self) -> dict[str, float]:
        """The weight syncs since the last call, the worker count, deaths and start-up seconds (`rollout/*`)."""
        start, self.start_s = self.start_s, 0.0
        return self.meter.take() | {"rollout/workers": float(self.n), "rollout/worker_start_s": start,
                                    "rollout/worker_deaths": float(self.counters["worker_deaths"])}

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
        for w in self.workers:
            if w is not None:
                w.close()
        self.workers = [None] * self.n

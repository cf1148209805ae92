"""The asynchronous rollout source (`rl.mode: async`): rollout workers generate while the learner trains.

Shape (AReaL; veRL's one-step-off-policy is η = 1 with one worker): the source issues rollout jobs
(one step's tasks each, drawn by the stage's sampler in step order) to a `WorkerPool`, as far ahead
as the staleness bound η allows (`rollout/staleness.py`); after every update the loop publishes the new
weights by version. Finished jobs wait in a bounded buffer; each step takes the first one that
finished, re-checks every trajectory's lag, stores and counts the over-stale ones under stage
`rl_stale` (never trained), grades (`roles.grader`) and selects the rest, and hands them to the one
RL step (`run/rl_loop.py`), which trains them with the decoupled surrogate: behavior log-probs from the
sampler, proximal log-probs recomputed by the learner at the start of the update, the ratio clipped
around the proximal policy (TIS / MIS still apply when `rl.algorithm.correction` is set).

Jobs: with one worker (`rollout.workers: 1`, `rollout.seeding: step`) a job is one step's tasks, sampled from
the worker's own generator. With `rollout.seeding: group` (the default with several workers) a job is one
group, sampled from its group's own generator (rollout/group_seeds.py): a step issues its
`prompts_per_step` group jobs at once, spread over the workers, the start rule counts outstanding groups in
steps (⌈groups / prompts_per_step⌉ ≤ η), and a step trains the first `prompts_per_step` groups admitted, in
(step, group) order, so with η = 0 the async path trains what the sync path trains at any worker count.
Weights go to every worker by version in buckets (rollout/weight_sync.py; a LoRA policy's adapters only,
after the first sync; a replaced worker gets the full weights), timed on the learner's side (the workers
pick them up between jobs or turns): `rollout/weight_sync_s`, `rollout/weight_sync_mb`.

Workers play the recipe's environment, or every environment of an `envs:` run (`rollout/routes.py`),
in spawned processes or Ray actors (`run.backend: ray`). With η = 0 and one worker, job k starts only
after step k − 1 was trained, on those weights, with the worker's generator seeded as the sync
loop's: the async path trains on the same data as sync (`tests/train/test_async.py`).

Checkpoints record the buffered results (trained after a resume) and the jobs still in flight (a
recorded decision: they are restarted from scratch, same tasks and seeds, at the resumed version).
"""

from __future__ import annotations

import dataclasses
import time

from tracerl.algorithms.spec.terms import Decoupled
from tracerl.contract.serialize import from_dict, to_dict
from tracerl.contract.task import Task
from tracerl.rollout.agent_loop import LoopBudgets
from tracerl.rollout.engine_api import sync_weights
from tracerl.rollout.parallel import adapters_suffice
from tracerl.rollout.weight_sync import SyncMeter, payload
from tracerl.rollout.worker_pool import WorkerPool
from tracerl.rollout.workers import ProcessWorker, RolloutJob, RolloutResult, SpecRef, worker_settings
from tracerl.tasks import next_groups
from tracerl.telemetry import async_metrics as am
from tracerl.rollout.sources import StepRollouts, select, step_sampler, tokens_left
from tracerl.rollout.staleness import StalenessGate, lag


def async_algorithm(algo):
    """The recipe's algorithm with the decoupled surrogate (unless it already sets one)."""
    return algo if algo.decoupled is not None else algo.model_copy(update={"decoupled": Decoupled()})


def worker_spec_ref(recipe, spec):
    """What a worker process rebuilds the rollout spec from: an `envs:` router's routes, else the recipe's env."""
    faults = recipe.faults.model_dump() if recipe.faults.active else None
    return spec.routes_ref(faults) if hasattr(spec, "routes_ref") else SpecRef.for_recipe(recipe)


def process_workers(model, tokenizer, recipe, spec_ref, hashes: dict[str, str]):
    """The default worker factory: spawned processes, one torch thread each."""

    def factory(wid: int, incarnation: int):
        return ProcessWorker(wid, worker_settings(  # the plain policy (LoRA merged), its autocast, the recipe's engine
            model, tokenizer, recipe, spec_ref, hashes,
            seed=recipe.run.seed * 1000 + wid + 7_919 * incarnation,  # worker 0 draws as the sync loop
            partial=recipe.rl.partial_rollouts, threads=recipe.rollout.threads))
    return factory


class AsyncSource:
    """Rollouts from workers running ahead of the learner (see the module docstring)."""

    def __init__(self, *, recipe, algo, sampler, spec, state, budgets, astate, grader, tokenizer, tokenizer_hashes,
                 store, until: int, model, worker_factory=None, engine=None):
        from tracerl.rollout.ray_backend import ray_workers

        cfg = recipe.rl
        self.engine = engine  # the driver's engine (held-out evaluation, the probe): synced at every publish
        self.recipe, self.algorithm, self.sampler, self.state, self.astate = recipe, algo, sampler, state, astate
        self.grader, self.tokenizer, self.store, self.until, self.budgets = grader, tokenizer, store, until, budgets
        self.n_roll = algo.rollouts_per_task(cfg.group_size)
        self.sampler_cfg = step_sampler(recipe, algo)  # dynamic sampling takes the groups of as many jobs as it needs
        self.gate = StalenessGate(cfg.max_staleness)
        factory = worker_factory or (ray_workers if recipe.run.backend == "ray" else process_workers)(
            model, tokenizer, recipe, worker_spec_ref(recipe, spec), tokenizer_hashes)
        saved = state.async_state or AsyncState(next_job=state.step)
        self.buffer: list[RolloutResult] = list(saved.buffer)
        self.restart: list[RolloutJob] = list(saved.in_flight)
        self.next_job = saved.next_job
        self.totals = dict(saved.totals)
        self.jobs: dict[int, RolloutJob] = {}  # issued and not yet received: their tasks, for the grader
        self.unlogged_stale: list = []
        self.model, self.meter = model, SyncMeter()
        self.group_jobs = recipe.rollout.group_seeded  # a job is one group (else one step)
        self.per_step = cfg.prompts_per_step if self.group_jobs else 1  # jobs per step
        self.pool = WorkerPool(factory, recipe.rollout.workers, full_weights=self._full_weights)

    def budget_left(self) -> bool:
        return tokens_left(self.recipe, self.state)

    def _make_jobs(self, k: int) -> list[RolloutJob]:
        """Step k's jobs: its tasks in one job, or (group jobs) one job per group, job id k·P + group index."""
        tasks = self.sampler.next_batch(self.recipe.rl.prompts_per_step) if self.budget_left() else []
        if not tasks:
            return []
        seed, sampling, n = self.recipe.run.seed * 100003 + k, self.recipe.sampling.model_dump(), self.n_roll
        if self.group_jobs:
            return [RolloutJob(k * self.per_step + i, [t] * n, [f"s{k}-p{i}"] * n, seed=seed, budgets=self.budgets,
                               sampling=sampling, group_seeds=True, step=k) for i, t in enumerate(tasks)]
        batch = [t for t in tasks for _ in range(n)]
        return [RolloutJob(k, batch, [f"s{k}-p{i // n}" for i in range(len(batch))], seed=seed, budgets=self.budgets,
                           sampling=sampling)]

    def _steps_ahead(self) -> int:
        """Steps issued and not yet trained: jobs buffered or in flight, in steps (⌈groups / P⌉ for group jobs)."""
        return -(-(len(self.buffer) + self.pool.in_flight) // self.per_step)

    def _step_of(self, job_id: int) -> int:
        return job_id // self.per_step

    def _submit(self, job: RolloutJob) -> None:
        self.jobs[job.job_id] = job
        self.pool.submit(job)

    def _receive(self, timeout: float) -> None:
        for r in self.pool.poll(timeout=timeout):
            self.state.generated_tokens += sum(t.num_action_tokens for t in r.trajectories)
            self.totals["results"] += 1
            job = self.jobs.pop(r.job_id, None)
            if self.grader is not None and job is not None:  # graded once, before staleness and selection
                self.grader.apply(r.trajectories, job.tasks, self.tokenizer)
            self.buffer.append(r)

    def _full_weights(self):
        """The current version's full weights (a replaced worker's first load)."""
        return self.weights_version, payload(self.model, self.weights_version, self.recipe.rollout.sync_bucket_mb)

    def _publish(self, model, version: int) -> None:
        self.model, self.weights_version = model, version
        lora = adapters_suffice(model) and getattr(self, "_sent_full", False)  # adapters only after a full sync
        p = payload(model, version, self.recipe.rollout.sync_bucket_mb, adapters_only=lora)
        self._sent_full = True
        self.meter.timed(lambda: self.pool.publish(version, p), p.mb * len(self.pool.workers))

    def start(self, model) -> None:
        self._publish(model, self.state.policy_version)
        if self.restart:
            self.store.add_event("async_restart", f"{len(self.restart)} in-flight rollout job(s) restarted from scratch "
                                 "on resume", stage="rl", step=self.state.step,
                                 payload={"jobs": [j.job_id for j in self.restart]})
        for job in self.restart:
            self._submit(job)

    def next(self) -> StepRollouts | None:
        """The next step's rollouts; None when nothing is left to generate (the token budget is spent).

        Each draw takes the next finished job's admitted groups after selection; without dynamic sampling
        one job is one step, with it (`tasks.sampler.kind: dynamic`, DAPO) the step takes jobs until it
        holds `prompts_per_step` groups with reward variance or `max_rounds` jobs were drawn."""
        cfg, taken, selection = self.recipe.rl, [], {}

        def draw(_k: int) -> list:
            round_: list = []
            for _ in range(self.per_step):  # one job, or (group jobs) a step's worth of groups
                got = self._next_admitted()
                if got is None:
                    break
                round_.append(got)
            if not round_:
                return []
            round_.sort(key=lambda got: got[0].job_id)  # (step, group) order: the sync loop's, whoever finished first
            taken.extend(round_)
            by_group: dict[str, list] = {}
            for got in round_:
                for t in got[1]:
                    by_group.setdefault(t.group_id, []).append(t)
            kept, counts = select(self.algorithm, list(by_group.values()), cfg.group_size, self.astate.generator)
            for k, v in counts.items():
                selection[k] = selection.get(k, 0.0) + v
            return kept

        batch = next_groups(self.sampler_cfg, draw, lambda groups: groups, cfg.prompts_per_step,
                            rewards=lambda g: [t.reward for t in g])
        if not taken:
            return None
        return self._step_rollouts(taken, [g for _, g in batch.groups], batch.report, selection)

    def _next_admitted(self) -> tuple[RolloutResult, list, float] | None:
        """The first finished job with trajectories inside the staleness bound: (result, admitted, seconds the
        learner waited); None when nothing is left to generate."""
        state, pool, buffer = self.state, self.pool, self.buffer
        while True:
            while ((state.step + self._steps_ahead() < self.until or self.sampler_cfg.kind == "dynamic")
                   and self.gate.may_start(self._steps_ahead()) and (self.group_jobs or pool.has_capacity())):
                jobs = self._make_jobs(self.next_job)
                if not jobs:
                    break
                for job in jobs:
                    self._submit(job)
                self.next_job += 1
            if not buffer and not pool.in_flight:
                return None
            t_wait = time.time()
            self._receive(0.0)
            while not buffer and pool.in_flight:
                self._receive(0.5)
            idle = time.time() - t_wait
            if not buffer:  # the jobs in flight were excluded (their workers died twice): issue new ones
                continue
            res = buffer.pop(0)  # the first job that finished, whichever step it was meant for
            admitted, rejected = self.gate.split(res.trajectories, state.policy_version)
            self.totals["rejected_stale"] += len(rejected)
            if rejected:
                self.store.add_trajectories(rejected, stage="rl_stale", step=state.step + 1)  # the step drawing them
            self.unlogged_stale += rejected  # a job rejected whole takes no step: its count goes with the next one
            if admitted:
                return res, admitted, idle
            if not self.budget_left():
                return None

    def _step_rollouts(self, taken: list, kept: list, report, selection: dict) -> StepRollouts:
        state, cfg, max_tokens = self.state, self.recipe.rl, self.recipe.env.max_tokens
        admitted = [t for _, a, _ in taken for t in a]
        entropy = {k: v for res, _, _ in taken for k, v in res.entropy.items()}
        res, idle = taken[-1][0], sum(i for _, _, i in taken)
        stale = self.unlogged_stale
        metrics = am.staleness_distribution([lag(t, state.policy_version) for t in admitted], [len(t) for t in admitted],
                                            max_tokens=max_tokens, eta=cfg.max_staleness)
        metrics |= am.rejected_by_length(stale, max_tokens=max_tokens)
        metrics |= {"async/rejected_stale": float(len(stale)), "async/rejected_stale_total": self.totals["rejected_stale"],
                    "async/queue_depth": float(len(self.buffer)), "async/queue_age_s": time.time() - res.finished_at,
                    "async/in_flight": float(self.pool.in_flight), "async/learner_idle_s": idle,
                    "async/job_lag_steps": float(state.step - self._step_of(res.job_id)), "async/max_staleness": float(cfg.max_staleness),
                    "async/jobs_per_step": float(len(taken)), **self.meter.take(),
                    "rollout/workers": float(len(self.pool.workers)),
                    "async/multi_version_frac": am.multi_version_fraction(admitted), **self.pool.counters.as_metrics()}
        line = (f" | lag {metrics.get('async/staleness/mean', 0):.2f} | stale {len(stale)} | idle {idle:.1f}s")
        self.unlogged_stale = []
        return StepRollouts(kept, admitted, entropy, report, selection, sum(r.busy_s for r, _, _ in taken), metrics,
                            line)

    def before_update(self) -> None:
        pass  # the workers keep sampling while the learner updates

    def publish(self, model, version: int) -> bool:
        self._publish(model, version)  # the workers' next jobs (or turns, with partial rollouts) use it
        if self.engine is not None:  # an engine copy of its own in the driver would otherwise evaluate version 0
            sync_weights(self.engine, model, version)
        return True

    def batch_metrics(self, batch, captured: dict) -> dict[str, float]:
        """The importance weights of the decoupled update and the token versions of the batch."""
        out = {}
        if "proximal" in captured:
            out |= am.importance_weights(captured["proximal"], batch.behavior_BT, batch.mask_BT)
        return out | am.version_metrics(batch.version_BT, batch.mask_BT, self.state.policy_version)

    def save(self) -> None:
        self.state.async_state = AsyncState(list(self.buffer), self.pool.outstanding(), self.next_job, dict(self.totals))

    def finish(self, store) -> None:
        leftover = [t for r in self.buffer for t in r.trajectories]
        if leftover:  # generated and validated but past the stage's last step: kept, never trained
            store.add_trajectories(leftover, stage="rl_unused", step=self.state.step)
        self.state.async_state = None

    def close(self) -> None:
        self.pool.close()


@dataclasses.dataclass
class AsyncState:
    """What a checkpoint of an async stage holds: the finished results not yet trained (trained after a resume),
    the jobs in flight (restarted from scratch, same tasks and seeds), the next job's number and the totals.
    `to_dict`/`from_dict` convert every nested type explicitly (jobs, tasks, budgets, results, trajectories),
    so a resumed run gets the same typed objects back, whatever the checkpoint's file format."""

    buffer: list[RolloutResult] = dataclasses.field(default_factory=list)
    in_flight: list[RolloutJob] = dataclasses.field(default_factory=list)
    next_job: int = 0
    totals: dict[str, float] = dataclasses.field(default_factory=lambda: {"rejected_stale": 0.0, "results": 0.0})

    def to_dict(self) -> dict:
        return {"buffer": [_result_dict(r) for r in self.buffer], "in_flight": [_job_dict(j) for j in self.in_flight],
                "next_job": self.next_job, "totals": dict(self.totals)}

    @classmethod
    def from_dict(cls, d: dict) -> "AsyncState":
        return cls([_result_from(r) for r in d.get("buffer", [])], [_job_from(j) for j in d.get("in_flight", [])],
                   int(d.get("next_job", 0)), {k: float(v) for k, v in d.get("totals", {}).items()})


def _job_dict(j: RolloutJob) -> dict:
    return {"job_id": j.job_id, "tasks": [t.to_dict() for t in j.tasks], "group_ids": list(j.group_ids), "seed": j.seed,
            "budgets": dataclasses.asdict(j.budgets), "sampling": dict(j.sampling), "attempt": j.attempt,
            "generator_state": j.generator_state, "group_seeds": j.group_seeds, "step": j.step}


def _job_from(d: dict) -> RolloutJob:
    return RolloutJob(int(d["job_id"]), [Task.from_dict(t) for t in d["tasks"]], list(d["group_ids"]), int(d["seed"]),
                      LoopBudgets(**d["budgets"]), dict(d["sampling"]), int(d.get("attempt", 0)),
                      d.get("generator_state"), bool(d.get("group_seeds", False)), d.get("step"))


def _result_dict(r: RolloutResult) -> dict:
    return {"job_id": r.job_id, "worker_id": r.worker_id, "start_version": r.start_version,
            "trajectories": [to_dict(t) for t in r.trajectories], "entropy": r.entropy, "busy_s": r.busy_s,
            "idle_s": r.idle_s, "finished_at": r.finished_at, "generator_state": r.generator_state}


def _result_from(d: dict) -> RolloutResult:
    return RolloutResult(d["job_id"], d["worker_id"], d["start_version"], [from_dict(t) for t in d["trajectories"]],
                         d["entropy"], d["busy_s"], d["idle_s"], d["finished_at"], d.get("generator_state"))

"""`run.backend: ray`: the Ray runtime of a run, rollout actors for both RL loops, and the manifest entry.

- `run_on_ray` brings the runtime up for one run (a local one with `ray.num_cpus` CPUs, no dashboard,
  quiet logs, shut down at the end; or a connection to `ray.address`) and runs the recipe inside it.
  Without Ray installed it stops with one sentence (exit 2) before a run directory exists.
- `ray_workers` is the async loop's worker factory on Ray: the same `WorkerSettings` and generator
  seeds as `async_source.process_workers`, each worker a `RayWorker` actor reserving
  `ray.num_cpus_per_worker` / `ray.num_gpus_per_worker`.
- `WorkerEpisodes` plays the sync loop's rollouts in one worker: each call (one step's tasks, or one
  dynamic-sampling round) is one job, sent after the weights of the policy version it samples, and it
  carries the sync loop's generator state, so the actor draws the tokens the in-process loop draws and
  the driver's generator ends where it would have (checkpoints and resume are unchanged). A dead actor
  is replaced and its job re-run from the same generator state (the same tokens), recorded as a
  `rollout_worker_died` event and counted.

The learner, held-out evaluation, the probe and audit replays, SFT and difficulty profiling stay in the
driver; rollouts and their environment / sandbox calls run in the actors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import threading

import torch

from tracerl.errors import UserError
from tracerl.rollout.workers import RolloutJob, RolloutResult, SpecRef, WorkerSettings, validated, weights_blob, worker_settings

_ACTIVE = {"on": False}
_OPEN: list = []  # the sync loop's rollout workers of the running recipe, closed when it ends


def active() -> bool:
    """True while `run_on_ray` runs a recipe (the pipeline then builds its rollouts on Ray)."""
    return _ACTIVE["on"]


def import_ray():
    try:
        import ray
    except ImportError:
        raise UserError("run.backend: ray needs Ray, which is not installed; install it with "
                        "pip install 'tracerl[ray]' (or set run.backend=local)") from None
    return ray


@contextlib.contextmanager
def ray_runtime(cfg):
    """Ray up for the block: started locally (and shut down after) or connected to `cfg.address`; an
    already initialised runtime (a test's) is used as it is."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # quiet a FutureWarning of Ray >= 2.4x
        kw = dict(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=True)
        if cfg.address is None:
            # Ray starts its workers at nice 15 (so a driver stays responsive); here the rollout actor is the
            # run's hot path, and on a busy machine nice 15 starved it (rollouts 6x slower than local).
            os.environ.setdefault("RAY_worker_niceness", "0")
            kw |= dict(num_cpus=cfg.num_cpus, num_gpus=torch.cuda.device_count() if cfg.num_gpus_per_worker else 0,
                       object_store_memory=cfg.object_store_mb << 20)
        try:
            ray.init(address=cfg.address or "local", **kw)  # "local": a new runtime, never a cluster left running
        except Exception as err:  # no cluster at the address, or a local runtime that did not come up in time
            raise UserError(f"could not start or reach Ray at ray.address {cfg.address!r} ({str(err).splitlines()[0]}); "
                            "start a cluster with `ray start --head` or set ray.address: null") from None
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def needs_wrapper(recipe) -> bool:
    """Whether the run must go through `run_on_ray`: Ray actors, or rollout worker processes to close at its end."""
    return (recipe.run.backend == "ray" or recipe.rollout.workers > 1) and not active()


def run_on_ray(run_recipe, recipe, *, resume=None):
    """`run_recipe(recipe, resume=...)` inside the recipe's Ray runtime (`run.backend: ray`), the sync loop's
    rollout workers closed at its end. A SIGTERM exits through the clean-up (a local runtime's processes would
    otherwise outlive the run)."""
    main = threading.current_thread() is threading.main_thread()
    with ray_runtime(recipe.ray) if recipe.run.backend == "ray" else contextlib.nullcontext():
        prev = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main else None
        _ACTIVE["on"] = True
        try:
            return run_recipe(recipe, resume=resume)
        finally:
            _ACTIVE["on"] = False
            while _OPEN:
                _OPEN.pop().close()
            if main:
                signal.signal(signal.SIGTERM, prev)


def backend_manifest(recipe) -> dict:
    """The manifest's `backend` entry: which backend, and on Ray the runtime and the actors' resources."""
    if recipe.run.backend != "ray":
        return {"name": "local"}
    import ray

    res = ray.cluster_resources() if ray.is_initialized() else {}
    return {"name": "ray", "ray_version": ray.__version__, "address": recipe.ray.address or "local",
            "cluster": {"CPU": res.get("CPU", 0.0), "GPU": res.get("GPU", 0.0), "nodes": len(ray.nodes())},
            "rollout_actor": {"num_cpus": recipe.ray.num_cpus_per_worker, "num_gpus": recipe.ray.num_gpus_per_worker},
            "rollout_actors": recipe.rollout.workers}


def _settings(model, tokenizer, recipe, spec_ref, hashes, *, seed: int, threads: int, partial: bool) -> WorkerSettings:
    return worker_settings(model, tokenizer, recipe, spec_ref, hashes, seed=seed, partial=partial, threads=threads,
                           device="cuda" if recipe.ray.num_gpus_per_worker > 0 else "cpu")


def ray_workers(model, tokenizer, recipe, spec_ref, hashes):
    """The async loop's worker factory on Ray (seeds as `process_workers`: worker 0 draws as the sync loop)."""
    from tracerl.rollout.ray_worker import RayWorker

    cfg = recipe.ray

    def factory(wid: int, incarnation: int):
        settings = _settings(model, tokenizer, recipe, spec_ref, hashes, seed=recipe.run.seed * 1000 + wid + 7_919 * incarnation,
                             threads=max(1, int(cfg.num_cpus_per_worker)), partial=recipe.rl.partial_rollouts)
        return RayWorker(wid, settings, num_cpus=cfg.num_cpus_per_worker, num_gpus=cfg.num_gpus_per_worker,
                         resources=recipe.placement.rollout.resources)
    return factory


class WorkerEpisodes:
    """`run_episodes` for the sync loop, played by one rollout worker made by `factory(incarnation)`."""

    def __init__(self, factory, model, *, env_name: str, store=None, max_replacements: int = 3):
        self.factory, self.model, self.env_name, self.store = factory, model, env_name, store
        self.max_replacements = max_replacements
        self.worker, self.incarnation, self.sent, self.jobs = None, 0, None, 0
        self.counters = {"worker_deaths": 0, "jobs_retried": 0}

    def __call__(self, engine, spec, tasks, group_ids, *, budgets, sampling, policy_version: int, seed: int,
                 tokenizer_hashes=None, generator: torch.Generator | None = None, entropy_out=None, **kw):
        if kw:
            raise TypeError(f"WorkerEpisodes does not take {sorted(kw)}")
        if not set(spec.name.split("+")) <= set(self.env_name.split("+")):  # an envs: stage plays some of the run's
            raise ValueError(f"the rollout worker plays env {self.env_name!r}, not {spec.name!r}")
        if generator is None:
            generator = torch.Generator().manual_seed(seed)
        job = RolloutJob(self.jobs, list(tasks), list(group_ids), seed, budgets, dict(sampling),
                         generator_state=generator.get_state())
        self.jobs += 1
        res = validated(self._run(job, policy_version))
        generator.set_state(res.generator_state)
        if entropy_out is not None:
            entropy_out.update(res.entropy)
        return res.trajectories

    def _run(self, job: RolloutJob, version: int) -> RolloutResult:
        while True:
            if self.worker is None:
                self.worker = self.factory(self.incarnation)
            w = self.worker
            if self.sent != version:  # weights by version, after each update
                w.send_weights(version, weights_blob(self.model))
                self.sent = version
            w.submit(job)
            while w.alive():
                for ev in w.events(0.5):
                    if ev[0] == "done" and ev[1].job_id == job.job_id:
                        return ev[1]
            self._replace(w, job)
            job = dataclasses.replace(job, attempt=job.attempt + 1)

    def _replace(self, w, job: RolloutJob) -> None:
        self.counters["worker_deaths"] += 1
        self.counters["jobs_retried"] += 1
        n = self.counters["worker_deaths"]
        if self.store is not None:
            self.store.add_event("rollout_worker_died", f"rollout worker died during job {job.job_id}; re-run from the "
                                 "same generator state on a new worker", stage="rl",
                                 payload={"job": job.job_id, "attempt": job.attempt, "incarnation": self.incarnation,
                                          **self.counters})
        if n > self.max_replacements:
            raise RuntimeError(f"the rollout worker died {n} times (the last during job {job.job_id}); see its traceback above")
        w.close()
        self.worker, self.sent = None, None
        self.incarnation += 1

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def ray_episodes(recipe, model, tokenizer, hashes, *, store=None, spec_ref=None) -> WorkerEpisodes:
    """The sync loop's rollouts in one Ray actor, its generator seeded as the sync loop's (`run.seed * 1000`);
    `spec_ref` what the actor plays (an `envs:` run's `RoutesRef`; default: the recipe's env)."""
    from tracerl.rollout.ray_worker import RayWorker

    cfg, spec_ref = recipe.ray, spec_ref or SpecRef.for_recipe(recipe)

    def factory(incarnation: int):
        settings = _settings(model, tokenizer, recipe, spec_ref, hashes, seed=recipe.run.seed * 1000,
                             threads=recipe.run.threads, partial=False)  # threads as the driver's: the same floats
        return RayWorker(0, settings, num_cpus=cfg.num_cpus_per_worker, num_gpus=cfg.num_gpus_per_worker,
                         resources=recipe.placement.rollout.resources)
    return WorkerEpisodes(factory, model, env_name=spec_ref.name, store=store)


def parallel_episodes(recipe, model, tokenizer, hashes, *, store=None, spec_ref=None):
    """The sync loop's rollouts on `rollout.workers` workers seeded per group (rollout/parallel.py): spawned
    processes locally, Ray actors on Ray, `rollout.threads` torch threads each."""
    from tracerl.rollout.parallel import ParallelEpisodes
    from tracerl.rollout.workers import ProcessWorker

    spec_ref, ro = spec_ref or SpecRef.for_recipe(recipe), recipe.rollout

    def factory(wid: int, incarnation: int):
        seed = recipe.run.seed * 1000 + wid + 7_919 * incarnation  # unused by group-seeded jobs
        if recipe.run.backend != "ray":
            return ProcessWorker(wid, worker_settings(model, tokenizer, recipe, spec_ref, hashes, seed=seed,
                                                      partial=False, threads=ro.threads))
        from tracerl.rollout.ray_worker import RayWorker

        settings = _settings(model, tokenizer, recipe, spec_ref, hashes, seed=seed, threads=ro.threads, partial=False)
        return RayWorker(wid, settings, num_cpus=recipe.ray.num_cpus_per_worker, num_gpus=recipe.ray.num_gpus_per_worker,
                         resources=recipe.placement.rollout.resources)
    return ParallelEpisodes(factory, model, ro.workers, env_name=spec_ref.name, store=store, bucket_mb=ro.sync_bucket_mb,
                            sender=broadcast_sender(recipe, model))


def broadcast_sender(recipe, model):
    """`rollout.weight_sync: broadcast`: the driver's end of the weight-broadcast group (rollout/broadcast_sync.py),
    NCCL when the learner is on CUDA and every Ray actor holds a whole GPU of its own, gloo otherwise; else None."""
    if recipe.rollout.weight_sync != "broadcast":
        return None
    from tracerl.models.device import model_device
    from tracerl.rollout.broadcast_sync import BroadcastSender, backend_for

    dev = str(model_device(model))
    own_gpu = recipe.run.backend == "ray" and recipe.ray.num_gpus_per_worker >= 1  # never the learner's GPU shared
    return BroadcastSender(backend_for(dev, "cuda" if own_gpu else "cpu"), dev)


def backend_episodes(recipe, episodes, *, model, tokenizer, hashes, store=None, spec_ref=None):
    """What the sync RL loop plays its rollouts with: `episodes` itself locally with one worker, one Ray actor on
    Ray, `rollout.workers` processes or actors seeded per group (rollout/parallel.py)."""
    if recipe.rl.mode == "async":  # async builds its own workers (process_workers, ray_workers)
        return episodes
    ro = recipe.rollout
    if hasattr(episodes, "engines"):  # gateway.agent: the gateway fronts rollout.workers engine processes
        if ro.workers == 1:
            return episodes
        from tracerl.rollout.workers import worker_settings

        settings = worker_settings(model, tokenizer, recipe, None, {}, seed=0, partial=False, threads=ro.threads)
        return episodes.engines(settings, ro.workers, model)
    if ro.workers > 1 or (ro.group_seeded and recipe.run.backend == "ray"):
        made = parallel_episodes(recipe, model, tokenizer, hashes, store=store, spec_ref=spec_ref)
    elif recipe.run.backend == "ray":
        made = ray_episodes(recipe, model, tokenizer, hashes, store=store, spec_ref=spec_ref)
    else:
        return episodes
    _OPEN.append(made)
    return made

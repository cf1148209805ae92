"""The asynchronous RL stage (`rl.mode: async`): rollout workers generate while the learner trains.

Shape (AReaL; veRL's one-step-off-policy is η = 1 with one worker): the learner issues rollout jobs
(one step's tasks each, drawn by the stage's sampler in step order) to a `WorkerPool`, as far ahead
as the staleness bound η allows (`train/staleness.py`); after every update it publishes the new
weights by version. Finished jobs wait in a bounded buffer; each learner step takes the first one that
finished, re-checks every trajectory's lag, stores and counts the over-stale ones under stage
`rl_stale` (never trained), and runs the same Batch / Algorithm update as the sync loop with the
decoupled surrogate: behavior log-probs from the sampler, proximal log-probs recomputed by the
learner at the start of the update, the ratio clipped around the proximal policy (TIS / MIS still
apply when `rl.algorithm.correction` is set).

With η = 0 and one worker, job k starts only after step k − 1 was trained, on those weights, with the
worker's generator seeded as the sync loop's: the async path trains on the same data as sync
(`tests/train/test_async.py`).

Checkpoints record the buffered results (trained after a resume) and the jobs still in flight (a
recorded decision: they are restarted from scratch, same tasks and seeds, at the resumed version).
"""

from __future__ import annotations

import time

from tqdm import tqdm

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import StepContext
from tracerl.algorithms.spec.terms import Decoupled
from tracerl.config import Recipe
from tracerl.contract.serialize import from_dict, to_dict
from tracerl.rollout.worker_pool import WorkerPool
from tracerl.rollout.workers import ProcessWorker, RolloutJob, RolloutResult, SpecRef, WorkerSettings, param_dtype, weights_blob
from tracerl.store.credit import per_trajectory, record_credit
from tracerl.tasks import next_groups
from tracerl.telemetry import GateTripped, step_metrics
from tracerl.telemetry import async_metrics as am
from tracerl.train.roles import Roles
from tracerl.train.staleness import StalenessGate, lag
from tracerl.train.learner import build_learner
from tracerl.train.ray_backend import ray_workers
from tracerl.train.update import rl_update


def async_algorithm(algo):
    """The recipe's algorithm with the decoupled surrogate (unless it already sets one)."""
    return algo if algo.decoupled is not None else algo.model_copy(update={"decoupled": Decoupled()})


class _CapturingRoles:
    """The roles, keeping the proximal log-probs the update computes (for the importance-weight metrics)."""

    def __init__(self, roles: Roles):
        self._roles, self.captured = roles, {}

    def __getattr__(self, name):
        return getattr(self._roles, name)

    def scores(self, batch, needs):
        out = self._roles.scores(batch, needs)
        self.captured |= out
        return out


def process_workers(model, tokenizer, recipe: Recipe, spec_ref: SpecRef, hashes: dict[str, str]):
    """The default worker factory: spawned processes, one torch thread each."""

    def factory(wid: int, incarnation: int):
        return ProcessWorker(wid, WorkerSettings(
            type(model), model.config, tokenizer, spec_ref,
            generator_seed=recipe.run.seed * 1000 + wid + 7_919 * incarnation,  # worker 0 draws as the sync loop
            tokenizer_hashes=hashes, partial_rollouts=recipe.rl.partial_rollouts, dtype=param_dtype(model)))
    return factory


def spec_ref_for(recipe: Recipe) -> SpecRef:
    from tracerl.envs import get_env

    module = getattr(get_env(recipe.env.name).make, "__module__", None)
    return SpecRef(recipe.env.name, recipe.faults.model_dump() if recipe.faults.active else None,
                   (module,) if module and module != "__main__" else ())


def train_rl_async(model, tokenizer, engine, sampler, recipe: Recipe, *, spec, log, on_eval, on_checkpoint, store,
                   tokenizer_hashes, progress: bool = True, state=None, until: int | None = None,
                   stage_index: int = 0, reference=None, worker_factory=None):
    """`train_rl` with rollout workers beside the learner (same arguments, `state` an `RLState`, given by
    `train_rl`'s dispatch; `worker_factory` for tests). Returns the state."""
    cfg = recipe.rl
    algo = async_algorithm(cfg.algorithm)
    until = cfg.steps if until is None else until
    sampling = recipe.sampling.model_dump()
    ln = build_learner(recipe, algo, model, tokenizer, spec=spec, state=state, reference=reference,
                       stage_index=stage_index)
    roles, astate, budgets, gates, audits, probe, classify = (ln.roles, ln.astate, ln.budgets, ln.gates, ln.audits,
                                                              ln.probe, ln.classify)
    G, P = cfg.group_size, cfg.prompts_per_step
    n_roll = algo.rollouts_per_task(G)
    gate = StalenessGate(cfg.max_staleness)
    factory = worker_factory or (ray_workers if recipe.run.backend == "ray" else process_workers)(  # run.backend
        model, tokenizer, recipe, spec_ref_for(recipe), tokenizer_hashes)
    saved = state.async_state or {}
    buffer: list[RolloutResult] = [_result_from(d) for d in saved.get("buffer", [])]
    restart: list[RolloutJob] = list(saved.get("in_flight", []))
    next_job = saved.get("next_job", state.step)
    totals = dict(saved.get("totals", {"rejected_stale": 0.0, "results": 0.0}))
    if restart:
        store.add_event("async_restart", f"{len(restart)} in-flight rollout job(s) restarted from scratch on resume",
                        stage="rl", step=state.step, payload={"jobs": [j.job_id for j in restart]})

    def budget_left() -> bool:
        return cfg.max_generated_tokens is None or state.generated_tokens < cfg.max_generated_tokens

    def make_job(k: int) -> RolloutJob | None:
        tasks = sampler.next_batch(P) if budget_left() else []
        if not tasks:
            return None
        batch = [t for t in tasks for _ in range(n_roll)]
        return RolloutJob(k, batch, [f"s{k}-p{i // n_roll}" for i in range(len(batch))],
                          seed=recipe.run.seed * 100003 + k, budgets=budgets, sampling=sampling)

    pool = WorkerPool(factory, cfg.rollout_workers)
    unlogged_stale: list = []

    def receive(timeout: float) -> None:
        for r in pool.poll(timeout=timeout):
            state.generated_tokens += sum(t.num_action_tokens for t in r.trajectories)
            totals["results"] += 1
            buffer.append(r)
    bar = tqdm(total=until, initial=state.step, desc="rl", disable=not progress, leave=False)
    try:
        pool.publish(state.policy_version, weights_blob(model))
        for job in restart:
            pool.submit(job)
        while state.step < until and budget_left():
            t0 = time.time()
            while (state.step + len(buffer) + pool.in_flight < until and gate.may_start(len(buffer) + pool.in_flight)
                   and pool.has_capacity()):
                job = make_job(next_job)
                if job is None:
                    break
                pool.submit(job)
                next_job += 1
            if not buffer and not pool.in_flight:
                break  # nothing left to generate (budget spent)
            t_wait = time.time()
            receive(0.0)
            while not buffer and pool.in_flight:
                receive(0.5)
            learner_idle = time.time() - t_wait
            if not buffer:  # the jobs in flight were excluded (their workers died twice): issue new ones
                continue
            res = buffer.pop(0)  # the first job that finished, whichever step it was meant for
            admitted, rejected = gate.split(res.trajectories, state.policy_version)
            totals["rejected_stale"] += len(rejected)
            if rejected:
                store.add_trajectories(rejected, stage="rl_stale", step=state.step)
            unlogged_stale += rejected  # a job rejected whole takes no step: its count goes with the next one
            metrics = _train_one(res, admitted, rejected, recipe=recipe, algo=algo, roles=roles, astate=astate,
                                 store=store, state=state, tokenizer=tokenizer, classify=classify, n_roll=n_roll,
                                 stage_index=stage_index, sampler=sampler)
            if metrics is None:  # every trajectory of the job was over-stale: no step, wait for the next job
                continue
            metrics |= am.staleness_distribution([lag(t, state.policy_version) for t in admitted],
                                                 [len(t) for t in admitted], max_tokens=recipe.env.max_tokens,
                                                 eta=cfg.max_staleness)
            metrics |= am.rejected_by_length(unlogged_stale, max_tokens=recipe.env.max_tokens)
            metrics |= {"async/rejected_stale": float(len(unlogged_stale)), "async/rejected_stale_total": totals["rejected_stale"],
                        "async/queue_depth": float(len(buffer)), "async/queue_age_s": time.time() - res.finished_at,
                        "async/in_flight": float(pool.in_flight), "async/learner_idle_s": learner_idle,
                        "async/job_lag_steps": float(state.step - res.job_id), "async/max_staleness": float(cfg.max_staleness),
                        "async/multi_version_frac": am.multi_version_fraction(admitted), **pool.counters.as_metrics()}
            state.policy_version += 1
            state.step += 1
            pool.publish(state.policy_version, weights_blob(model))  # the workers' next turns use it
            metrics |= audits.metrics(state.step)
            metrics |= probe.merge(probe.before_rl(engine, model, admitted, recipe.sampling.temperature),  # first step
                                   probe.metrics(state.step, engine, model, admitted, recipe.sampling.temperature))
            state.sampler_state = sampler.state_dict()
            state.gate_state = gates.state_dict()
            state.roles_state, state.algorithm_state = roles.state_dict(), astate.state_dict()
            state.async_state = {"buffer": [_result_dict(r) for r in buffer], "in_flight": pool.outstanding(),
                                 "next_job": next_job, "totals": totals}
            if on_eval and cfg.eval_every and state.step % cfg.eval_every == 0 and state.step < cfg.steps:
                metrics |= on_eval(state.step, state.policy_version)
            log(metrics, state.step)
            held = f" | held-out {metrics['eval/success']:.3f}" if "eval/success" in metrics else ""
            line = (f"rl step {state.step:>3}/{cfg.steps} | reward {metrics.get('reward/mean', 0):.3f}{held} | "
                    f"tool calls {metrics.get('tool/calls_per_episode', 0):.2f} | "
                    f"lag {metrics.get('async/staleness/mean', 0):.2f} | stale {len(unlogged_stale)} | "
                    f"idle {learner_idle:.1f}s | {time.time() - t0:.1f}s")
            tqdm.write(line) if progress else print(line, flush=True)
            unlogged_stale = []
            bar.update()
            trip = gates.update(state.step, metrics)
            if trip is not None:
                on_checkpoint(state.step, state)
                store.add_event("gate", trip.reason, stage="rl", step=state.step, payload=trip.as_dict())
                raise GateTripped(trip)
            if cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0:
                on_checkpoint(state.step, state)
        leftover = [t for r in buffer for t in r.trajectories]
        if leftover:  # generated and validated but past the stage's last step: kept, never trained
            store.add_trajectories(leftover, stage="rl_unused", step=state.step)
        state.async_state = None
    finally:
        bar.close()
        pool.close()
    return state


def _train_one(res: RolloutResult, trajs, rejected, *, recipe, algo, roles, astate, store, state, tokenizer, classify,
               n_roll, stage_index, sampler):
    """Selection, collate and the Algorithm update on one job's admitted trajectories; its metrics or None."""
    cfg = recipe.rl
    if not trajs:
        return None
    selection: dict[str, float] = {}
    groups: dict[str, list] = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t)
    tasks, kept_groups = [], []
    for gid, g in groups.items():
        kept, rep = algo.select_group(g, cfg.group_size, astate.generator)
        for k, v in rep.items():
            selection[k] = selection.get(k, 0.0) + v
        kept_groups.append([g[j] for j in kept])
        tasks.append(gid)
    got = next_groups(recipe.tasks.sampler, lambda k: tasks, lambda ts: kept_groups, len(tasks),
                      rewards=lambda g: [t.reward for t in g])
    train = [t for g in kept_groups for t in g]
    kept_ids = {t.trajectory_id for t in train}
    store.add_trajectories(train, stage="rl", step=state.step)
    store.add_trajectories([t for t in trajs if t.trajectory_id not in kept_ids], stage="rl_filtered", step=state.step)
    t1 = time.time()
    ent = [res.entropy.get(t.trajectory_id, []) for t in train]
    rollout_entropy = sum(map(sum, ent)) / max(1, sum(map(len, ent)))
    ctx = StepContext(max_tokens=recipe.env.max_tokens, entropy_coef=astate.entropy_coef(algo, rollout_entropy),
                      generator=astate.generator, step=state.step)
    batch = collate(train, pad_id=tokenizer.pad_token_id, truncation=cfg.truncation, truncation_penalty=cfg.truncation_penalty)
    rewards, shaping = algo.shape_rewards(batch, train, ctx)
    capture = _CapturingRoles(roles)
    stats, adv = rl_update(algo, capture, batch, rewards, minibatches=cfg.minibatches, ctx=ctx,
                           whole_groups=cfg.whole_groups)
    record_credit(store, state.step, batch.trajectory_ids, per_trajectory(adv, batch.action_BT), batch.weight_B.tolist())
    if "updates" in stats:
        roles.policy.scheduler.step()
    stats |= {"entropy_coef": ctx.entropy_coef} if algo.entropy.active else {}
    if astate.controller is not None:
        stats["entropy/magic_c"] = astate.controller.coef
    metrics = step_metrics(train, advantages=adv, token_entropy=ent, loss_stats=stats | shaping | selection,
                           timings={"rollout": res.busy_s, "learner": time.time() - t1},
                           policy_version=state.policy_version, classify=classify)
    if "proximal" in capture.captured:
        metrics |= am.importance_weights(capture.captured["proximal"], batch.behavior_BT, batch.mask_BT)
    metrics |= am.version_metrics(batch.version_BT, batch.mask_BT, state.policy_version)
    metrics |= _task_metrics(got.report, sampler, state.generated_tokens, stage_index)
    return metrics


def _task_metrics(report, sampler, generated_tokens: int, stage_index: int) -> dict[str, float]:
    """The sync loop's `tasks/*` metrics (train/rl.py), kept here so the two loops do not import each other."""
    return {"tasks/rounds": float(report.rounds), "tasks/groups_generated": float(report.groups_generated),
            "tasks/groups_kept": float(report.kept_groups), "tasks/oversampling": report.oversampling,
            "tasks/zero_variance_groups": float(sum(report.zero_variance_groups.values())),
            "tasks/generated_tokens": float(generated_tokens), "rl/stage": float(stage_index), **sampler.metrics()}


def _result_dict(r: RolloutResult) -> dict:
    return {"job_id": r.job_id, "worker_id": r.worker_id, "start_version": r.start_version,
            "trajectories": [to_dict(t) for t in r.trajectories], "entropy": r.entropy, "busy_s": r.busy_s,
            "idle_s": r.idle_s, "finished_at": r.finished_at}


def _result_from(d: dict) -> RolloutResult:
    return RolloutResult(d["job_id"], d["worker_id"], d["start_version"], [from_dict(t) for t in d["trajectories"]],
                         d["entropy"], d["busy_s"], d["idle_s"], d["finished_at"])


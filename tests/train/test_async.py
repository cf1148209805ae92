"""rl.mode async: the staleness bound holds, η = 0 trains on sync's data, partial rollouts keep per-token
versions, a killed worker is replaced and its job retried, a resume loses no committed trajectory."""

import copy
import os
import signal
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tracerl.algorithms.batch import collate
from tracerl.config import load_recipe
from tracerl.contract import TokenRole
from tracerl.errors import UserError
from tracerl.rollout import LoopBudgets, TorchEngine
from tracerl.rollout.workers import InProcessWorker, ProcessWorker, RolloutJob, RolloutResult, Runner, weights_blob
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.rollout.workers import SpecRef
from tracerl.rollout.async_source import process_workers
from tracerl.run.rl_loop import RLState, train_rl
from tracerl.train.roles import score_actions
from tracerl.rollout.staleness import StalenessGate, lag, oldest_version

from async_helpers import PARITY, SLOW, TURNS  # noqa: E402  (a module the spawned workers import too)
from tracerl.rollout.ray_backend import ray_workers


def _factory(backend, request, model, tok, recipe):
    """The pool's workers: spawned processes, or Ray actors on the module's local runtime (tests/train/conftest.py)."""
    if backend == "ray":
        request.getfixturevalue("ray_local")
        return ray_workers(model, tok, recipe, SpecRef.for_recipe(recipe), {})
    return process_workers(model, tok, recipe, SpecRef.for_recipe(recipe), {})


def _recipe(*extra, env="parity_async"):
    return load_recipe("smoke", ["rl.steps=3", "rl.prompts_per_step=2", "rl.group_size=4", "rl.algorithm.kl.coef=0",
                                 "env.max_new_tokens=6", "rl.lr=0.01", f"env.name={env}", "rl.checkpoint_every=0",
                                 "rl.algorithm.decoupled={}", *extra])


def _run(model, tok, recipe, store, spec, *, factory=None, state=None, log=None, on_ckpt=None):
    sampler = UniformSampler(spec.generate("train", 16, 0), seed=3)
    if state is not None and state.sampler_state is not None:
        sampler.load_state_dict(state.sampler_state)
    kw = dict(spec=spec, log=log or (lambda m, s: None), on_eval=None, on_checkpoint=on_ckpt or (lambda s, st: None),
              store=store, tokenizer_hashes={}, progress=False, state=state or RLState(policy_version=1))
    engine = TorchEngine(model, tok)
    if factory is not None:
        return train_rl(model, tok, engine, sampler, recipe, worker_factory=factory, **kw)
    assert recipe.rl.mode == "sync"
    return train_rl(model, tok, engine, sampler, recipe, **kw)


def _stored(store, stage, steps):
    return [[(t.token_ids, t.policy_versions, [x for x in t.behavior_logprobs if x == x])  # NaN off the actions
             for t in store.trajectories(stage=stage, step=s)] for s in range(1, steps + 1)]  # steps 1..N


@pytest.mark.timeout(900)  # spawns rollout worker processes (slow to import on a loaded machine)
@pytest.mark.parametrize("backend", ["process", "ray"])
def test_eta0_async_trains_on_the_same_data_as_sync(tiny, tmp_path, backend, request):
    """One worker (a spawned process or a Ray actor), η = 0: the same tokens, versions and log-probs at every
    step, and the same weights."""
    model0, tok = tiny
    sync_model, async_model = copy.deepcopy(model0), copy.deepcopy(model0)
    with Store(tmp_path / "s.sqlite") as s, Store(tmp_path / "a.sqlite") as a:
        torch.manual_seed(0)  # the minibatch order
        _run(sync_model, tok, _recipe(), s, PARITY)
        recipe = _recipe("rl.mode=async", "rl.max_staleness=0")
        torch.manual_seed(0)
        _run(async_model, tok, recipe, a, PARITY, factory=_factory(backend, request, async_model, tok, recipe))
        assert _stored(s, "rl", 3) == _stored(a, "rl", 3)
        assert all(len(x) == 8 for x in _stored(a, "rl", 3))
        assert a.count("rl_stale") == 0
    for p, q in zip(sync_model.parameters(), async_model.parameters()):
        assert torch.equal(p, q)


def test_partial_rollout_keeps_each_tokens_version(tiny):
    """Weights land after the first turn: turn 1 carries version 5 and the old policy's log-probs, later turns
    version 6 and the new policy's (so the KV cache was rebuilt under the new weights)."""
    model0, tok = tiny
    torch.manual_seed(1)
    new = copy.deepcopy(model0)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.2 * torch.randn_like(p))
    runner = Runner(copy.deepcopy(model0), tok, TURNS, generator_seed=0, tokenizer_hashes={})
    runner.load(5, None)
    calls = []

    def on_turn():
        calls.append(1)
        if len(calls) == 2:
            runner.load(6, weights_blob(new))
        return runner.version

    tasks = TURNS.generate("train", 4, 0)
    job = RolloutJob(0, tasks, [f"g{i}" for i in range(4)], seed=1,
                     budgets=LoopBudgets(max_turns=3, max_tokens=150, max_new_tokens=6), sampling={"temperature": 1.0})
    trajs, _ = runner.run(job, on_turn)
    spanning = [t for t in trajs if sum(s.kind == "action" for s in t.spans) >= 2]
    assert spanning, "no episode lasted two turns"
    for t in trajs:
        actions = [s for s in t.spans if s.kind == "action"]
        batch = collate([t], pad_id=tok.pad_token_id)
        old_lp = score_actions(model0, batch, temperature=1.0).logprobs_BT[0]
        new_lp = score_actions(new, batch, temperature=1.0).logprobs_BT[0]
        for k, span in enumerate(actions):
            want_v, want_lp = (5, old_lp) if k == 0 else (6, new_lp)
            assert set(t.policy_versions[span.start:span.end]) == {want_v}
            got = torch.tensor(t.behavior_logprobs[span.start:span.end])
            assert torch.allclose(got, want_lp[span.start:span.end], atol=1e-4)
        assert oldest_version(t) == 5 and lag(t, 7) == 2
    assert all(v == -1 for t in trajs for v, r in zip(t.policy_versions, t.roles) if r != TokenRole.ACTION)


class DelayedWorker:
    """An in-process worker with a speed: a job runs on the weights it holds when it starts, and its result is
    delivered `delay` ticks later; a poll is one tick, a learner step (a weight publish) `learner_ticks` ticks."""

    def __init__(self, wid, runner, delays, learner_ticks):
        self.worker_id, self.runner, self.delays, self.learner_ticks = wid, runner, delays, learner_ticks
        self.jobs, self.current = [], None

    def send_weights(self, version, blob):
        self.runner.load(version, blob)
        self._tick(self.learner_ticks)

    def submit(self, job):
        self.jobs.append(job)

    def _tick(self, n):
        if self.current is not None:
            self.current[-1] -= n

    def events(self, timeout=0.0):
        out = []
        if self.current is None and self.jobs:
            job, v = self.jobs.pop(0), self.runner.version
            trajs, ent = self.runner.run(job)
            self.current = [RolloutResult(job.job_id, self.worker_id, v, trajs, ent, 0.0, 0.0, 0.0), next(self.delays)]
            out.append(("started", self.worker_id, job.job_id, v))
        self._tick(1)
        if self.current is not None and self.current[-1] <= 0:
            out.append(("done", self.current[0]))
            self.current = None
        return out

    def alive(self):
        return True

    pid = None

    def close(self):
        pass


def _delayed_factory(model, tok, delays, learner_ticks):
    def factory(wid, incarnation):
        return DelayedWorker(wid, Runner(copy.deepcopy(model), tok, PARITY, generator_seed=wid, tokenizer_hashes={}),
                             iter(delays[wid]), learner_ticks)
    return factory


@pytest.mark.timeout(900)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(eta=st.integers(0, 2), workers=st.integers(1, 3), learner_ticks=st.integers(0, 30),
       delays=st.lists(st.lists(st.integers(1, 60), min_size=12, max_size=12), min_size=3, max_size=3))
def test_no_trajectory_older_than_eta_is_trained(tiny, eta, workers, learner_ticks, delays):
    """Random worker and learner speeds: every trained trajectory's oldest token is within η of the version it
    was trained at; every rejected one is beyond it; the stage still trains all its steps."""
    assume(workers <= eta + 1)  # more workers than η + 1 is refused at load (test_async_keys_are_checked)
    model0, tok = tiny
    model = copy.deepcopy(model0)
    recipe = _recipe("rl.mode=async", f"rl.max_staleness={eta}", f"rollout.workers={workers}", "rl.steps=4",
                     "rl.prompts_per_step=1", "rl.group_size=2", "rl.minibatches=1")
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "s.sqlite") as store:
        state = _run(model, tok, recipe, store, PARITY, factory=_delayed_factory(model, tok, delays, learner_ticks))
        assert state.step == 4
        for s in range(1, 5):  # stored under the update's number, 1..N, as logged
            trained = list(store.trajectories(stage="rl", step=s))
            assert trained
            assert all(lag(t, s) <= eta for t in trained)
            assert all(lag(t, s) > eta for t in store.trajectories(stage="rl_stale", step=s))


def test_a_job_overtaken_twice_is_rejected_and_counted(tiny, tmp_path):
    """η = 1, two workers; job 0 (worker 0) is slow, jobs 1 and 2 (worker 1) are fast. Job 1 trains at step 1
    (version 1, lag 0), job 2 at step 2 (version 2, lag 0), then job 0 lands at step 3: learner version 3,
    sampled by version 1, lag 2 > η, so both its trajectories are rejected, stored under rl_stale, counted."""
    model0, tok = tiny
    model = copy.deepcopy(model0)
    recipe = _recipe("rl.mode=async", "rl.max_staleness=1", "rollout.workers=2", "rl.steps=4",
                     "rl.prompts_per_step=1", "rl.group_size=2", "rl.minibatches=1")
    logged = []
    with Store(tmp_path / "o.sqlite") as store:
        state = _run(model, tok, recipe, store, PARITY, log=lambda m, s: logged.append(m),
                     factory=_delayed_factory(model, tok, [[200] + [1] * 11, [1] * 12, [1] * 12], 0))
        assert state.step == 4
        stale = list(store.trajectories(stage="rl_stale"))
        assert len(stale) == 2 and {t.group_id for t in stale} == {"s0-p0"}
        assert all(lag(t, 3) == 2 for t in stale)
        assert [t.group_id for t in store.trajectories(stage="rl", step=1)] == ["s1-p0"] * 2
    assert logged[-1]["async/rejected_stale_total"] == 2
    assert sum(m["async/rejected_stale"] for m in logged) == 2


def test_gate_start_rule_and_split(tiny):
    gate = StalenessGate(1)
    assert gate.may_start(1) and not gate.may_start(2)  # with 2 jobs ahead, a new one is trained 2 versions later


class KillOnStart:
    """A worker killed as soon as it reports it started an episode (once): a process by its pid, a Ray actor by
    `ray.kill`."""

    killed = 0

    def __init__(self, inner):
        self.inner, self.worker_id = inner, inner.worker_id

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def events(self, timeout=0.0):
        ev = self.inner.events(timeout)
        if any(e[0] == "started" for e in ev) and KillOnStart.killed == 0:
            if hasattr(self.inner, "kill"):
                self.inner.kill()  # ray.kill
            else:
                os.kill(self.inner.pid, signal.SIGKILL)  # mid-episode: the slow env step takes 3 s
            KillOnStart.killed += 1
        return ev


@pytest.mark.timeout(900)  # spawns rollout worker processes (slow to import on a loaded machine)
@pytest.mark.parametrize("backend", ["process", pytest.param("ray", marks=pytest.mark.slow)])  # test_ray_backend kills an actor too
def test_killed_worker_is_replaced_and_its_job_retried(tiny, tmp_path, backend, request):
    model0, tok = tiny
    model = copy.deepcopy(model0)
    recipe = _recipe("rl.mode=async", "rl.max_staleness=1", "rl.steps=2", "rl.prompts_per_step=1", "rl.group_size=2",
                     env="parity_slow")
    KillOnStart.killed = 0
    base = _factory(backend, request, model, tok, recipe)
    factory = lambda wid, inc: KillOnStart(base(wid, inc)) if inc == 0 else base(wid, inc)  # noqa: E731
    logged = []
    with Store(tmp_path / "k.sqlite") as store:
        state = _run(model, tok, recipe, store, SLOW, factory=factory, log=lambda m, s: logged.append(m))
        assert state.step == 2 and KillOnStart.killed == 1
        assert [len(list(store.trajectories(stage="rl", step=s))) for s in (1, 2)] == [2, 2]
    # the dead worker held the job it was running and (η = 1) the next one queued behind it: both re-issued
    assert logged[-1]["async/worker_deaths"] == 1 and logged[-1]["async/jobs_retried"] == 2
    assert logged[-1]["async/jobs_excluded"] == 0


def test_resume_trains_every_buffered_result_and_restarts_in_flight_jobs(tiny, tmp_path):
    """At a checkpoint some results wait in the buffer and some jobs are in flight: after a resume the buffered
    trajectories are trained (or rejected as stale, and counted), the in-flight jobs are restarted and recorded."""
    model0, tok = tiny
    model = copy.deepcopy(model0)
    recipe = _recipe("rl.mode=async", "rl.max_staleness=2", "rollout.workers=3", "rl.steps=4", "rl.checkpoint_every=2",
                     "rl.prompts_per_step=1", "rl.group_size=2", "rl.minibatches=1")
    delays = [[1] * 12, [1] * 12, [1] * 12]  # fast workers: the buffer fills while the learner trains
    snaps = {}
    with Store(tmp_path / "r.sqlite") as store:
        _run(model, tok, recipe, store, PARITY, factory=_delayed_factory(model, tok, delays, 0),
             on_ckpt=lambda s, st: snaps.setdefault(s, (copy.deepcopy(st), copy.deepcopy(model.state_dict()))))
    saved, weights = snaps[2]
    buffered = {t.trajectory_id for r in saved.async_state.buffer for t in r.trajectories}  # typed: AsyncState
    in_flight = [j.job_id for j in saved.async_state.in_flight]
    assert buffered or in_flight
    resumed = copy.deepcopy(model0)
    resumed.load_state_dict(weights)
    with Store(tmp_path / "r2.sqlite") as store:
        state = _run(resumed, tok, recipe, store, PARITY, factory=_delayed_factory(resumed, tok, delays, 0),
                     state=RLState(**vars(saved)))
        assert state.step == 4
        seen = {t.trajectory_id for stage in ("rl", "rl_stale", "rl_filtered", "rl_unused")
                for t in store.trajectories(stage=stage)}
        assert buffered <= seen  # no committed trajectory is lost
        if in_flight:
            ev = store.events("async_restart")
            assert ev and ev[0]["payload"]["jobs"] == in_flight


@pytest.mark.parametrize("bad", [["rl.max_staleness=2"], ["rollout.workers=2", "rollout.seeding=step"],
                                 ["rl.mode=async", "rl.max_staleness=0", "rl.prompts_per_step=1", "rollout.workers=2"]])
# the last: 2 workers > the (η + 1) × 1 group-sized jobs that may run at once
def test_async_keys_are_checked(bad):
    with pytest.raises(UserError):
        load_recipe("smoke", bad)


def test_inprocess_worker_runs_a_job_at_its_version(tiny):
    model0, tok = tiny
    w = InProcessWorker(0, Runner(copy.deepcopy(model0), tok, PARITY, generator_seed=0, tokenizer_hashes={}))
    w.send_weights(3, weights_blob(model0))
    w.submit(RolloutJob(7, PARITY.generate("train", 2, 0), ["a", "b"], seed=0, budgets=LoopBudgets(max_new_tokens=4),
                        sampling={"temperature": 1.0}))
    started, (_, res) = w.events()
    assert started == ("started", 0, 7, 3) and res.job_id == 7 and res.start_version == 3
    assert {v for t in res.trajectories for v in t.policy_versions if v >= 0} == {3}
    assert ProcessWorker  # the spawn implementation answers the same calls (exercised above)


def test_dynamic_sampling_under_async_draws_jobs_until_groups_have_variance(tmp_path):
    """DAPO dynamic sampling with rollout workers: a step takes finished jobs until it holds prompts_per_step
    groups whose rewards differ (or max_rounds jobs were drawn); every trained group has reward variance."""
    import json

    from tracerl.run.pipeline import run_recipe
    from tracerl.store import Store

    run = tmp_path / "run"
    run_recipe(load_recipe("smoke", ["rl.mode=async", "rl.max_staleness=1", "tasks.sampler.kind=dynamic",
                                     "rl.steps=2", "stages=[sft, rl]", "run.threads=1", f"run.dir={run}"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in rows if m.get("stage") == "rl" and "tasks/rounds" in m]
    assert len(steps) == 2
    for m in steps:
        assert m["async/jobs_per_step"] == m["tasks/rounds"] >= 1
        assert m["tasks/groups_generated"] == 4 * m["tasks/rounds"]  # 4 prompts per job
        assert m["tasks/groups_kept"] + m["tasks/zero_variance_groups"] <= m["tasks/groups_generated"]
    with Store(run / "store.sqlite") as store:
        groups: dict = {}
        for t in store.trajectories(stage="rl"):
            groups.setdefault(t.group_id, []).append(t.reward)
    assert groups and all(max(r) > min(r) for r in groups.values())

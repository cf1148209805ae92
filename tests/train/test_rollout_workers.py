"""rollout.workers: N in sync mode: a step's groups split across N engine workers (spawned processes, Ray
actors) sample what one worker samples, and a worker killed mid-step is replaced and its groups re-run.

Each run takes 2 RL steps of 4 groups × 4 rows of the parity env (a reward the tiny model earns from the
start, so the steps move the weights). The reference is the in-process loop with `rollout.seeding: group`
(one worker, each group from its own generator). With 2 workers the groups split 2 + 2: every stored token,
role, version and reward is the reference's, behavior log-probs agree to 1e-5 (a row's batched forward
has other rows beside it: float rounding) and the final weights to 1e-5."""

import copy
import os
import signal

import pytest
import torch

from tracerl.config import load_recipe
from tracerl.rollout import TorchEngine
from tracerl.rollout.ray_backend import parallel_episodes
from tracerl.run.rl_loop import RLState, train_rl
from tracerl.store import Store
from tracerl.tasks import UniformSampler

from async_helpers import PARITY  # noqa: E402  (a module the workers import too)


def _recipe(*extra):
    return load_recipe("smoke", ["rl.steps=2", "rl.prompts_per_step=4", "rl.group_size=4", "rl.algorithm.kl.coef=0",
                                 "env.max_new_tokens=6", "rl.lr=0.01", "env.name=parity_async", "rl.checkpoint_every=0",
                                 "run.threads=1", *extra])


def _train(model, tok, recipe, store, episodes=None, logged=None):
    sampler = UniformSampler(PARITY.generate("train", 16, 0), seed=3)
    torch.manual_seed(0)  # the minibatch order
    kw = {} if episodes is None else {"episodes": episodes}
    return train_rl(model, tok, TorchEngine(model, tok), sampler, recipe, spec=PARITY,
                    log=lambda m, s: logged.append(m) if logged is not None else None, on_eval=None,
                    on_checkpoint=lambda s, st: None, store=store, tokenizer_hashes={}, progress=False,
                    state=RLState(policy_version=1), **kw)


def _stored(store):
    return [[(t.token_ids, t.roles, t.policy_versions, t.reward, t.group_id) for t in store.trajectories(stage="rl", step=s)]
            for s in (1, 2)]


def _logprobs(store):
    return torch.tensor([x for s in (1, 2) for t in store.trajectories(stage="rl", step=s)
                         for x in t.behavior_logprobs if x == x])


@pytest.fixture(scope="module")
def one_worker(tiny, tmp_path_factory):
    """The reference: one worker in the trainer's process, seeded per group."""
    model0, tok = tiny
    model = copy.deepcopy(model0)
    with Store(tmp_path_factory.mktemp("one") / "s.sqlite") as store:
        _train(model, tok, _recipe("rollout.seeding=group"), store)
        assert any(not torch.equal(p, q) for p, q in zip(model0.parameters(), model.parameters()))  # it learned
        return _stored(store), _logprobs(store), model


def _same_as_one_worker(one_worker, store, model):
    rows, lps, ref = one_worker
    assert _stored(store) == rows and all(len(r) == 16 for r in rows)
    assert torch.allclose(_logprobs(store), lps, atol=1e-5, rtol=0)
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=0)


class KillOnStart:
    """A worker killed when it reports it started job `at`: SIGKILL to its process, or `ray.kill` of its actor."""

    def __init__(self, inner, at):
        self.inner, self.at, self.worker_id = inner, at, inner.worker_id

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def events(self, timeout=0.0):
        ev = self.inner.events(timeout)
        if any(e[0] == "started" and e[2] == self.at for e in ev):
            if hasattr(self.inner, "proc"):
                os.kill(self.inner.pid, signal.SIGKILL)
                self.inner.proc.join(10)
            else:
                self.inner.kill()
            return [e for e in ev if e[0] != "done"]
        return ev


def _run_killing(tok, model, recipe, store, logged=None):
    """2 steps on `rollout.workers` workers; worker 1's first incarnation killed once it started job 3 (step 2's
    share: jobs 0, 1 are step 1's)."""
    eps = parallel_episodes(recipe, model, tok, {}, store=store)
    base = eps.factory
    eps.factory = lambda wid, inc: KillOnStart(base(wid, inc), at=3) if (wid, inc) == (1, 0) else base(wid, inc)
    try:
        _train(model, tok, recipe, store, episodes=eps, logged=logged)
    finally:
        eps.close()
    assert eps.counters == {"worker_deaths": 1, "jobs_retried": 1} and eps.incarnation == [0, 1]
    ev = store.events("rollout_worker_died")
    assert len(ev) == 1 and ev[0]["payload"]["job"] == 3 and ev[0]["payload"]["worker"] == 1


@pytest.mark.slow  # about 30 s: three worker processes start (two, then the replacement)
@pytest.mark.timeout(600)
def test_two_worker_processes_sample_what_one_does_even_when_one_dies(tiny, tmp_path, one_worker):
    """run.backend: local: the workers are spawned processes; worker 1 is SIGKILLed during step 2's job, a new
    process replaces it, loads the current version and re-runs the same groups with the same seeds."""
    model0, tok = tiny
    model = copy.deepcopy(model0)
    logged = []
    with Store(tmp_path / "w.sqlite") as store:
        _run_killing(tok, model, _recipe("rollout.workers=2"), store, logged)
        _same_as_one_worker(one_worker, store, model)
    # the sync after step 1 sent the tiny model's weights to both workers; its seconds and MiB are logged
    assert logged[1]["rollout/weight_sync_mb"] > 0 and logged[1]["rollout/weight_sync_s"] > 0
    assert logged[0]["rollout/worker_start_s"] > 0 and "rollout/weight_sync_s" not in logged[0]  # start-up apart
    assert logged[1]["rollout/workers"] == 2.0 and logged[1]["rollout/worker_deaths"] == 1.0


@pytest.mark.timeout(600)
def test_two_ray_actors_sample_what_one_worker_does_even_when_one_is_killed(tiny, tmp_path, one_worker, ray_local):
    """run.backend: ray: the step's groups split over 2 actors (weights through the object store); actor 1 is
    killed (`ray.kill`) during step 2's job, replaced, and its groups re-run: the one worker's tokens and weights."""
    model0, tok = tiny
    model = copy.deepcopy(model0)
    logged = []
    with Store(tmp_path / "r.sqlite") as store:
        _run_killing(tok, model, _recipe("rollout.workers=2", "run.backend=ray", "ray.num_cpus_per_worker=0.5"), store,
                     logged)
        _same_as_one_worker(one_worker, store, model)
    sync_mb = logged[1]["rollout/weight_sync_mb"]  # version 2 to both actors: twice the tiny model's tensors
    state_mb = sum(v.numel() * v.element_size() for v in {v.data_ptr(): v for v in model.state_dict().values()}.values()
                   ) / 2**20  # each tensor once (lm_head is tied to the embeddings)
    assert 2 * state_mb < sync_mb < 2 * state_mb + 0.1  # + torch.save's headers


@pytest.mark.slow  # 30-55 s: two actors, a sync and an async run (tests/train/test_async.py runs group jobs fast)
@pytest.mark.timeout(600)
def test_async_group_jobs_on_two_actors_train_what_sync_trains_at_eta0(tiny, tmp_path, ray_local):
    """rl.mode: async, η = 0, rollout.workers: 2 (Ray actors): each step issues its 4 groups as 4 jobs spread
    over the actors, and trains them in group order once all landed, so the stored rows are the sync loop's
    (one worker, seeded per group; both with the decoupled surrogate) and the weights agree to 1e-5."""
    model0, tok = tiny
    sync_model, async_model = copy.deepcopy(model0), copy.deepcopy(model0)
    logged = []
    with Store(tmp_path / "s.sqlite") as s, Store(tmp_path / "a.sqlite") as a:
        _train(sync_model, tok, _recipe("rollout.seeding=group", "rl.algorithm.decoupled={}"), s)
        _train(async_model, tok, _recipe("rl.mode=async", "rl.max_staleness=0", "rollout.workers=2", "run.backend=ray",
                                         "ray.num_cpus_per_worker=0.5"), a, logged=logged)
        assert _stored(a) == _stored(s) and a.count("rl_stale") == 0
        assert torch.allclose(_logprobs(a), _logprobs(s), atol=1e-5, rtol=0)
    for p, q in zip(sync_model.parameters(), async_model.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=0)
    assert [m["async/jobs_per_step"] for m in logged] == [4.0, 4.0]  # a job is a group
    assert all(m["rollout/weight_sync_mb"] > 0 for m in logged)

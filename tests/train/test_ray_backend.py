"""run.backend: ray on a real local Ray runtime (2 CPUs): the sync loop's rollouts in a Ray actor draw the
tokens the in-process loop draws, a killed actor's job is re-run from the same generator state and counted,
and the backend's keys are checked at load time. The async pool on Ray actors is tested with the process
workers in tests/train/test_async.py (parametrised over both)."""

import copy
import sys

import pytest
import torch

from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.rollout import LoopBudgets
from tracerl.rollout.ray_worker import RayWorker
from tracerl.rollout.workers import InProcessWorker, RolloutJob, Runner, WorkerSettings, SpecRef, weights_blob
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.rollout.ray_backend import WorkerEpisodes, ray_episodes
from tracerl.rollout import TorchEngine
from tracerl.run.rl_loop import RLState, train_rl

from async_helpers import PARITY  # noqa: E402  (a module the actors import too)


def _recipe(*extra):
    return load_recipe("smoke", ["rl.steps=3", "rl.prompts_per_step=2", "rl.group_size=4", "rl.algorithm.kl.coef=0",
                                 "env.max_new_tokens=6", "rl.lr=0.01", "env.name=parity_async", "rl.checkpoint_every=0",
                                 "run.threads=1", *extra])


def _train(model, tok, recipe, store, episodes=None):
    sampler = UniformSampler(PARITY.generate("train", 16, 0), seed=3)
    torch.manual_seed(0)  # the minibatch order
    kw = {} if episodes is None else {"episodes": episodes}
    return train_rl(model, tok, TorchEngine(model, tok), sampler, recipe, spec=PARITY, log=lambda m, s: None,
                    on_eval=None, on_checkpoint=lambda s, st: None, store=store, tokenizer_hashes={}, progress=False,
                    state=RLState(policy_version=1), **kw)


def _stored(store, steps):
    return [[(t.token_ids, t.roles, t.policy_versions, [x for x in t.behavior_logprobs if x == x], t.reward)  # NaN off actions
             for t in store.trajectories(stage="rl", step=s)] for s in range(1, steps + 1)]


class KillDuringJob:
    """The first actor, killed by `ray.kill` when it reports it started job `at`."""

    def __init__(self, inner, at):
        self.inner, self.at, self.worker_id = inner, at, inner.worker_id

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def events(self, timeout=0.0):
        ev = self.inner.events(timeout)
        if any(e[0] == "started" and e[2] == self.at for e in ev):
            self.inner.kill()
            return [e for e in ev if e[0] != "done"]
        return ev


@pytest.mark.timeout(600)
def test_sync_rollouts_in_a_ray_actor_equal_local_even_when_it_dies(tiny, tmp_path, ray_local):
    """Three sync steps with rollouts in one Ray actor, killed during step 2's job: every stored token, role,
    version, behavior log-prob and reward, and the final weights, are the in-process loop's; the death is
    recorded and counted, and the job re-ran on a new actor."""
    model0, tok = tiny
    local, remote = copy.deepcopy(model0), copy.deepcopy(model0)
    recipe = _recipe("run.backend=ray")
    with Store(tmp_path / "l.sqlite") as ls, Store(tmp_path / "r.sqlite") as rs:
        _train(local, tok, recipe, ls)
        eps = ray_episodes(recipe, remote, tok, {}, store=rs)
        base = eps.factory
        eps.factory = lambda inc: KillDuringJob(base(inc), at=1) if inc == 0 else base(inc)
        try:
            _train(remote, tok, recipe, rs, episodes=eps)
        finally:
            eps.close()
        assert _stored(ls, 3) == _stored(rs, 3) and all(len(x) == 8 for x in _stored(rs, 3))
        assert eps.counters == {"worker_deaths": 1, "jobs_retried": 1} and eps.incarnation == 1
        ev = rs.events("rollout_worker_died")
        assert len(ev) == 1 and ev[0]["payload"]["job"] == 1
    for p, q in zip(local.parameters(), remote.parameters()):
        assert torch.equal(p, q)


def test_worker_episodes_carry_the_generator_state(tiny):
    """The adapter over an in-process worker: two jobs draw what run_episodes draws from one generator, and the
    caller's generator ends where it would (so a checkpoint saves the same state)."""
    from tracerl.rollout import run_episodes

    model, tok = tiny
    tasks = PARITY.generate("train", 3, 0)
    kw = dict(budgets=LoopBudgets(max_new_tokens=5), sampling={"temperature": 1.0}, policy_version=4, tokenizer_hashes={})
    runner = Runner(copy.deepcopy(model), tok, PARITY, generator_seed=99, tokenizer_hashes={})
    eps = WorkerEpisodes(lambda inc: InProcessWorker(0, runner), model, env_name=PARITY.name)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for seed in (1, 2):
        got = eps(None, PARITY, tasks, ["a", "b", "c"], seed=seed, generator=g1, **kw)
        want = run_episodes(TorchEngine(model, tok), PARITY, tasks, ["a", "b", "c"], seed=seed, generator=g2, **kw)
        assert [(t.token_ids, t.behavior_logprobs, t.policy_versions) for t in got] == \
               [(t.token_ids, t.behavior_logprobs, t.policy_versions) for t in want]
    assert torch.equal(g1.get_state(), g2.get_state())
    assert {v for t in got for v in t.policy_versions if v >= 0} == {4}


def test_ray_worker_answers_the_worker_calls(tiny, ray_local):
    """send_weights by version, submit, events (started, done), pid, alive; after ray.kill, alive() is False."""
    model, tok = tiny
    settings = WorkerSettings(type(model), model.config, tok, SpecRef("parity_async", None, ("async_helpers",)),
                              generator_seed=0, tokenizer_hashes={})
    w = RayWorker(0, settings)
    try:
        w.send_weights(3, weights_blob(model))
        w.submit(RolloutJob(7, PARITY.generate("train", 2, 0), ["a", "b"], seed=0,
                            budgets=LoopBudgets(max_new_tokens=4), sampling={"temperature": 1.0}))
        events = []
        while not any(e[0] == "done" for e in events):
            events += w.events(1.0)
            assert w.alive()
        assert events[0][:3] == ("loaded", 0, 3) and events[1] == ("started", 0, 7, 3)  # the ack, then the job
        res = events[-1][1]
        assert res.job_id == 7 and res.start_version == 3 and len(res.trajectories) == 2
        assert {v for t in res.trajectories for v in t.policy_versions if v >= 0} == {3}
        assert isinstance(w.pid, int) and w.pid != __import__("os").getpid()
        w.kill()
        for _ in range(100):
            w.events(0.2)
            if not w.alive():
                break
        assert not w.alive() and w.events(0.0) == []
    finally:
        w.close()


@pytest.mark.parametrize("bad", [["ray.num_cpus=4"],  # ray: without run.backend: ray
                                 ["run.backend=ray", "rl.mode=async", "rl.max_staleness=2", "rollout.workers=3"],  # more actors than CPUs
                                 ["run.backend=ray", "ray.address=auto", "ray.num_cpus=3"],
                                 ["run.backend=ray", "ray.num_gpus_per_worker=1"],  # no GPU here
                                 ["run.backend=ray", "gateway.agent=x:y"]])
def test_backend_keys_are_checked_at_load(bad):
    if "ray.num_gpus_per_worker=1" in bad and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(UserError):
        load_recipe("smoke", bad)


def test_without_ray_one_sentence_and_no_run_dir(tmp_path, monkeypatch, capsys):
    """`ray` not importable: exit 2 with one sentence naming pip install 'tracerl[ray]', before any run dir exists."""
    from tracerl.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main(["train", "smoke", "run.backend=ray", f"run.dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr()
    assert "pip install 'tracerl[ray]'" in err.err + err.out
    assert not (tmp_path / "run").exists()


def test_a_null_address_starts_a_runtime_of_the_runs_own(monkeypatch):
    """ray.address: null must not join a `ray start` cluster that happens to run on this machine
    (ray.init with no address does): the run asks for address="local"; a set address is passed on."""
    import tracerl.rollout.ray_backend as rb

    calls = []

    class FakeRay:
        def is_initialized(self):
            return False

        def init(self, address=None, **kw):
            calls.append((address, kw.get("num_cpus")))

        def shutdown(self):
            pass

    monkeypatch.setattr(rb, "import_ray", lambda: FakeRay())
    for address in (None, "auto"):
        cfg = load_recipe("smoke", ["run.backend=ray", f"ray.address={address or 'null'}"]).ray
        with rb.ray_runtime(cfg):
            pass
    assert calls == [("local", 2), ("auto", None)]

"""`rollout.weight_sync: broadcast` in real runs: 2 RL steps on 2 rollout workers (spawned processes, Ray actors)
with weights over a gloo group of the driver and the workers, worker 1 killed during step 2's job (the group is
formed again with its replacement). Every stored token, role, version, reward and behavior log-prob, and the
final weights, are bit for bit those of the same run through the workers' own transport (the process queue,
the Ray object store), which loads the very same tensors (tests/rollout/test_broadcast_sync.py)."""

import copy

import pytest
import torch
from test_rollout_workers import _logprobs, _recipe, _run_killing, _stored, _train  # noqa: E402

from tracerl.rollout.broadcast_sync import BroadcastSender
from tracerl.rollout.ray_backend import parallel_episodes
from tracerl.store import Store


def _reference(tok, model0, recipe, path):
    model = copy.deepcopy(model0)
    eps = parallel_episodes(recipe, model, tok, {})
    with Store(path) as store:
        try:
            _train(model, tok, recipe, store, episodes=eps)
        finally:
            eps.close()
        return _stored(store), _logprobs(store), model


def _broadcast_equals(tok, model0, recipe, ref, path, monkeypatch):
    model, logged, formed = copy.deepcopy(model0), [], []
    form = BroadcastSender.form
    monkeypatch.setattr(BroadcastSender, "form", lambda self, ws: (formed.append(len(ws)), form(self, ws)))
    with Store(path) as store:
        _run_killing(tok, model, recipe, store, logged)
        rows, lps, ref_model = ref
        assert _stored(store) == rows and all(len(r) == 16 for r in rows)
        assert torch.equal(_logprobs(store), lps)
    for p, q in zip(ref_model.parameters(), model.parameters()):
        assert torch.equal(p, q)
    assert formed == [2, 2]  # the group of both workers at the first sync, again with worker 1's replacement
    # the sync after step 1 broadcast version 2 to both workers: logged as the other transports log it
    assert logged[1]["rollout/weight_sync_mb"] > 0 and logged[1]["rollout/weight_sync_s"] > 0
    assert "rollout/weight_sync_s" not in logged[0] and logged[0]["rollout/worker_start_s"] > 0
    return logged


@pytest.mark.slow  # 40-70 s: four worker processes and a replacement start
@pytest.mark.timeout(900)
def test_broadcast_to_worker_processes_trains_what_the_queue_does(tiny, tmp_path, monkeypatch):
    model0, tok = tiny
    ref = _reference(tok, model0, _recipe("rollout.workers=2"), tmp_path / "q.sqlite")
    logged = _broadcast_equals(tok, model0, _recipe("rollout.workers=2", "rollout.weight_sync=broadcast"), ref,
                               tmp_path / "b.sqlite", monkeypatch)
    state_mb = sum(v.numel() * v.element_size() for v in {v.data_ptr(): v for v in model0.state_dict().values()}.values()
                   ) / 2**20  # each tensor once (lm_head is tied to the embeddings), no torch.save headers
    assert logged[1]["rollout/weight_sync_mb"] == pytest.approx(2 * state_mb, rel=1e-9)  # one copy per worker


@pytest.mark.slow  # 40-70 s: four actors and a replacement start
@pytest.mark.timeout(900)
def test_broadcast_to_ray_actors_trains_what_the_object_store_does(tiny, tmp_path, ray_local, monkeypatch):
    model0, tok = tiny
    ray = ("rollout.workers=2", "run.backend=ray", "ray.num_cpus_per_worker=0.5")
    ref = _reference(tok, model0, _recipe(*ray), tmp_path / "o.sqlite")
    _broadcast_equals(tok, model0, _recipe(*ray, "rollout.weight_sync=broadcast"), ref, tmp_path / "b.sqlite", monkeypatch)

"""The API key, pushed weights and episode ownership (issue 38): every route needs the key when one
is set; a server beyond loopback or taking weights refuses to start without one; pushed weights are
checked in full (names, shapes, dtypes, finiteness, increasing versions) and a refused push leaves
the served weights bit for bit; an episode is read and finished only by its creator's key or token;
finished episodes are evicted. Real servers on 127.0.0.1, real `openai` client and httpx."""

import copy
import hashlib

import httpx
import openai
import pytest
import torch
from safetensors.torch import save

from tracerl.errors import UserError
from tracerl.rollout import TorchEngine
from tracerl.rollout.remote_engine import RemoteEngine, RemoteEngineError
from tracerl.serve import EpisodeRegistry, Gateway
from tracerl.serve.server import ServerThread

KEY, OTHER = "sk-trainer-0123", "sk-agent-4567"


@pytest.fixture
def keyed(tiny):
    """A gateway over a private copy of the tiny model, two API keys, weight pushes on."""
    _, _, model, tok = tiny
    gw = Gateway(TorchEngine(copy.deepcopy(model), tok), model_name="tiny", default_max_tokens=4,
                 accept_weights=True, api_keys=(KEY, OTHER),
                 registry=EpisodeRegistry(finished_ttl_s=0.2, max_episodes=8))
    with ServerThread(gw, reap_every_s=0.05) as srv:
        yield gw, srv
    gw.close()


def _h(key):
    return {"Authorization": f"Bearer {key}"}


def _forged(token: str) -> str:
    """The token with its last character changed: always a different token (a fixed "x" was the
    real token whenever the real one ended in "x", one draw in 64)."""
    return token[:-1] + ("y" if token.endswith("x") else "x")


def _digest(model) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode() + v.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def test_every_route_needs_the_key(keyed):
    gw, srv = keyed
    routes = [("GET", "/models"), ("GET", "/../health"), ("POST", "/chat/completions"), ("POST", "/completions"),
              ("POST", "/episodes"), ("GET", "/episodes/x"), ("POST", "/episodes/x/finish"),
              ("GET", "/episodes/x/trajectories"), ("POST", "/weights?version=1"), ("GET", "/nowhere")]
    for auth in ({}, _h("wrong"), {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}):
        for method, path in routes:
            r = httpx.request(method, srv.base_url + path, headers=auth, json={}, timeout=30)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", (method, path, auth)
    with openai.OpenAI(base_url=srv.base_url, api_key="wrong", max_retries=0) as c:
        with pytest.raises(openai.AuthenticationError):
            c.models.list()
    with openai.OpenAI(base_url=srv.base_url, api_key=KEY, max_retries=0) as c:
        out = c.completions.create(model="tiny", prompt="Ann has", max_tokens=2)
    assert out.choices[0].token_ids
    # a client's own principal header is dropped: it cannot claim another key's episodes
    r = httpx.post(srv.base_url + "/episodes", headers={**_h(KEY)}, json={}, timeout=30).json()
    forged = {**_h(OTHER), "X-Tracerl-Principal": gw_principal(KEY)}
    assert httpx.get(srv.base_url + f"/episodes/{r['episode_id']}", headers=forged, timeout=30).status_code == 403


def gw_principal(key):
    from tracerl.serve.guard import key_fingerprint

    return key_fingerprint(key)


def test_a_server_beyond_loopback_or_taking_weights_needs_a_key(tiny, capsys, tmp_path):
    _, _, model, tok = tiny
    for host, accept in (("0.0.0.0", False), ("127.0.0.1", True), ("example.org", False)):
        gw = Gateway(TorchEngine(model, tok), model_name="tiny", accept_weights=accept)
        with pytest.raises(UserError, match="needs an API key"):
            ServerThread(gw, host=host)
        gw.close()
    from tracerl.cli import main

    assert main(["serve", "--model", str(tmp_path), "--host", "0.0.0.0"]) == 2  # before the model is loaded
    assert "needs an API key" in capsys.readouterr().err
    assert main(["serve", "--model", str(tmp_path), "--accept-weights"]) == 2
    assert "--api-key" in capsys.readouterr().err


def _push(srv, state, version, key=KEY):
    return httpx.post(f"{srv.base_url}/weights", params={"version": version}, content=save(state),
                      headers=_h(key) if key else {}, timeout=60)


def test_pushed_weights_are_checked_in_full_and_a_refusal_changes_nothing(keyed):
    gw, srv = keyed
    model = gw.engine.model
    good = {k: v.detach().clone() for k, v in model.state_dict().items()}
    name = next(k for k, v in good.items() if v.is_floating_point() and v.dim() == 2)
    before, ask = _digest(model), {"model": "tiny", "prompt": "Ann has", "max_tokens": 4, "seed": 7}
    served = httpx.post(srv.base_url + "/completions", json=ask, headers=_h(KEY), timeout=60).json()
    cases = {
        "no key": (good, 1, None, 401),
        "NaN": ({**good, name: torch.full_like(good[name], float("nan"))}, 1, KEY, 400),
        "inf": ({**good, name: good[name].clone().index_fill_(0, torch.tensor([0]), float("inf"))}, 1, KEY, 400),
        "overflows bf16/fp16": ({**good, name: good[name].double() * 1e300}, 1, KEY, 400),
        "wrong shape": ({**good, name: torch.zeros(3, 3)}, 1, KEY, 400),
        "integer tensor": ({**good, name: torch.zeros_like(good[name], dtype=torch.int32)}, 1, KEY, 400),
        "unknown name": ({**good, "lm_head.extra": torch.zeros(2)}, 1, KEY, 400),
        "missing tensor": ({k: v for k, v in good.items() if k != name}, 1, KEY, 400),
        "not safetensors": (None, 1, KEY, 400),
    }
    for why, (state, version, key, status) in cases.items():
        if state is None:
            r = httpx.post(f"{srv.base_url}/weights", params={"version": 1}, content=b"\x00" * 64, headers=_h(key))
        else:
            r = _push(srv, state, version, key)
        assert r.status_code == status and "error" in r.json(), (why, r.status_code, r.text)
        assert _digest(model) == before and gw.policy_version == 0, why
    again = httpx.post(srv.base_url + "/completions", json=ask, headers=_h(KEY), timeout=60).json()
    assert again["choices"][0]["token_ids"] == served["choices"][0]["token_ids"]

    changed = {k: (v + 0.5 if v.is_floating_point() else v) for k, v in good.items()}
    assert _push(srv, changed, 0, KEY).status_code == 200  # the first push may repeat the start version
    assert _digest(model) != before and gw.policy_version == 0
    assert _push(srv, good, 0, KEY).status_code == 409  # versions only increase after that
    r = _push(srv, good, 3, KEY)
    assert r.status_code == 200 and gw.policy_version == 3 and _digest(model) == before
    r = _push(srv, changed, 2, KEY)
    assert r.status_code == 409 and r.json()["error"]["code"] == "stale_version" and _digest(model) == before
    eng = RemoteEngine(srv.base_url, "tiny", gw.tokenizer, api_key=KEY)  # the trainer's client, through the key
    eng.load_weights(good, 4)
    with pytest.raises(RemoteEngineError, match="refused"):
        eng.load_weights({name: torch.zeros(3, 3)}, 5)
    eng.close()
    assert gw.policy_version == 4


def test_a_weights_body_over_the_models_size_is_refused_unread(keyed):
    gw, srv = keyed
    from tracerl.serve.weights import state_bytes

    cap = state_bytes(gw.engine.model)
    r = httpx.post(f"{srv.base_url}/weights", params={"version": 1}, headers={**_h(KEY), "content-length": str(cap + 1)},
                   content=b"\x00" * (cap + 1), timeout=60)
    assert r.status_code == 413 and gw.policy_version == 0


def test_an_episode_is_read_and_finished_only_by_its_creator(keyed):
    gw, srv = keyed
    start = httpx.post(srv.base_url + "/episodes", json={"episode_id": "mine"}, headers=_h(KEY), timeout=30).json()
    eid, token = start["episode_id"], start["episode_token"]
    assert len(token) >= 20 and "episode_token" not in httpx.get(
        srv.base_url + f"/episodes/{eid}", headers=_h(KEY), timeout=30).json()
    with openai.OpenAI(base_url=srv.base_url, api_key=OTHER, max_retries=0) as other:
        with pytest.raises(openai.PermissionDeniedError):  # attaching a call to someone else's episode
            other.completions.create(model="tiny", prompt="Ann", max_tokens=2, extra_headers={"X-Episode-Id": eid})
    for method, path, body in (("GET", f"/episodes/{eid}", None), ("GET", f"/episodes/{eid}/trajectories", None),
                               ("POST", f"/episodes/{eid}/finish", {"reward": 100.0})):
        r = httpx.request(method, srv.base_url + path, json=body, headers=_h(OTHER), timeout=30)
        assert r.status_code == 403 and r.json()["error"]["code"] == "episode_forbidden", path
        r = httpx.request(method, srv.base_url + path, json=body,
                          headers={**_h(OTHER), "X-Episode-Token": _forged(token)}, timeout=30)
        assert r.status_code == 403
    assert gw.registry.get(eid).finished is False
    r = httpx.post(srv.base_url + f"/episodes/{eid}/finish", json={"reward": 0.25},  # the token hands it over
                   headers={**_h(OTHER), "X-Episode-Token": token}, timeout=30)
    assert r.status_code == 200 and r.json()["reward"] == 0.25
    r = httpx.post(srv.base_url + f"/episodes/{eid}/finish", json={"reward": 1.0}, headers=_h(KEY), timeout=30)
    assert r.status_code == 409  # ended once


def test_finished_episodes_are_evicted_and_the_count_is_bounded(keyed):
    import time

    gw, srv = keyed  # max_episodes=8, finished_ttl_s=0.2
    for i in range(8):
        httpx.post(srv.base_url + "/episodes", json={"episode_id": f"e{i}"}, headers=_h(KEY), timeout=30)
    r = httpx.post(srv.base_url + "/episodes", json={}, headers=_h(KEY), timeout=30)
    assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_episodes"  # all 8 open
    for i in range(3):
        httpx.post(srv.base_url + f"/episodes/e{i}/finish", json={"reward": 1.0}, headers=_h(KEY), timeout=30)
    for i in range(3):  # a start evicts the oldest finished one when full, before its TTL
        assert httpx.post(srv.base_url + "/episodes", json={}, headers=_h(KEY), timeout=30).status_code == 200
    assert gw.registry.stats()["episodes"] == 8 and gw.registry.stats()["evicted"] == 3
    for i in range(3, 8):
        httpx.post(srv.base_url + f"/episodes/e{i}/finish", json={"reward": 1.0}, headers=_h(KEY), timeout=30)
    deadline = time.time() + 10
    while gw.registry.stats()["episodes"] > 3 and time.time() < deadline:  # the reaper, after the TTL
        time.sleep(0.05)
    assert gw.registry.stats()["episodes"] == 3 and gw.registry.stats()["open"] == 3
    r = httpx.get(srv.base_url + "/episodes/e5", headers=_h(KEY), timeout=30)
    assert r.status_code == 404 and "evicted" in r.json()["error"]["message"]
    with openai.OpenAI(base_url=srv.base_url, api_key=KEY, max_retries=0) as c:  # loose calls: a ring
        gw.registry._loose = type(gw.registry._loose)(maxlen=2)
        for _ in range(4):
            c.completions.create(model="tiny", prompt="Ann", max_tokens=1)
    assert len(gw.registry._loose) == 2
    assert len(gw._sampled_text) <= gw._sampled_text.maxlen

"""A gateway fronting two engine processes (serve/engine_pool.py, `gateway.agent` with `rollout.workers: 2`):
seeded calls sample the same tokens whichever engine serves them (and the same as the one in-process engine),
an episode's calls stay on one engine, two episodes land on two, weight pushes reach both, and a dead engine's
call in flight is retried on the other while the dead one is replaced."""

import os
import signal
import threading
import time

import httpx
import pytest
import torch

from tracerl.rollout import TorchEngine
from tracerl.serve import Gateway
from tracerl.serve.engine_pool import EnginePool
from tracerl.serve.engine_proc import EngineProcess, engine_settings
from tracerl.serve.server import ServerThread

PROMPT = "Ann has 3 coins and finds 4 more. How many coins?"


@pytest.fixture(scope="module")
def pair(tiny):
    """(in-process gateway, its server), (two-engine gateway, its server, its pool), the model."""
    _, _, model, tok = tiny
    torch.set_num_threads(1)  # the engine processes run one thread each: the same float sums
    settings = engine_settings(model, tok, threads=1)
    pool = EnginePool(lambda i, inc: EngineProcess(i, settings, seed=i), 2, timeout_s=60)
    pool.sync(model, 0)
    one = Gateway(TorchEngine(model, tok), model_name="tiny", default_max_tokens=12)
    two = Gateway(TorchEngine(model, tok), model_name="tiny", default_max_tokens=12, pool=pool)
    with ServerThread(one) as s1, ServerThread(two) as s2:
        yield (one, s1), (two, s2, pool), model
    one.close()
    two.close()


def call(srv, episode=None, seed=7, max_tokens=12, text=PROMPT):
    headers = {"X-Episode-Id": episode} if episode else {}
    r = httpx.post(f"{srv.base_url}/chat/completions", headers=headers, timeout=60, json={
        "model": "tiny", "messages": [{"role": "user", "content": text}], "seed": seed, "max_tokens": max_tokens,
        "logprobs": True})
    assert r.status_code == 200, r.text
    return r.json()


def tokens(body):
    c = body["choices"][0]
    return c["token_ids"], [e["logprob"] for e in c["logprobs"]["content"]]


def start(gw, *eids):
    for e in eids:
        gw.registry.start(e)


def test_seeded_calls_are_the_same_on_either_engine_and_in_process(pair):
    (one, s1), (two, s2, pool), _ = pair
    start(two, "a", "b")
    ref = call(s1)
    a, b = call(s2, "a"), call(s2, "b")
    assert {a["tracerl"]["engine"], b["tracerl"]["engine"]} == {0, 1}  # two episodes, two engines
    ids, lps = tokens(ref)
    for got in (a, b):  # the same ids; log-probs equal up to float rounding across processes
        assert tokens(got)[0] == ids and len(ids) > 0
        assert max(abs(x - y) for x, y in zip(tokens(got)[1], lps)) < 1e-4
        assert got["tracerl"]["policy_version"] == 0 and got["prompt_token_ids"] == ref["prompt_token_ids"]


def test_an_episode_stays_on_its_engine_and_spans_say_which(pair):
    _, (two, s2, pool), _ = pair
    start(two, "c", "d")
    served = [call(s2, "c", seed=s)["tracerl"]["engine"] for s in range(3)]
    other = call(s2, "d")["tracerl"]["engine"]
    assert len(set(served)) == 1 and other != served[0]  # round-robin for the next new episode
    assert [c.engine for c in two.registry.get("c").calls] == served


def test_two_concurrent_episodes_spread_over_both_engines(pair):
    _, (two, s2, pool), _ = pair
    start(two, "e", "f")
    got = {}
    threads = [threading.Thread(target=lambda e=e: got.__setitem__(e, call(s2, e, seed=None, max_tokens=24)))
               for e in ("e", "f")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {got["e"]["tracerl"]["engine"], got["f"]["tracerl"]["engine"]} == {0, 1}


def test_constrained_adjusted_n2_calls_with_top_logprobs_match_in_process(pair):
    """The pattern, the logit adjustment and top log-probs travel to the engine process and sample there as
    in-process: a json_object response_format, a logit_bias and a frequency penalty, n=2, top_logprobs=3."""
    (one, s1), (two, s2, pool), _ = pair
    start(two, "m")
    body = {"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "seed": 5, "max_tokens": 10, "n": 2,
            "logprobs": True, "top_logprobs": 3, "response_format": {"type": "json_object"},
            "logit_bias": {"7": 3.0}, "frequency_penalty": 0.5}
    ref = httpx.post(f"{s1.base_url}/chat/completions", json=body, timeout=60).json()
    got = httpx.post(f"{s2.base_url}/chat/completions", json=body, headers={"X-Episode-Id": "m"}, timeout=60).json()
    assert [c["token_ids"] for c in got["choices"]] == [c["token_ids"] for c in ref["choices"]]
    tops = [[[t["token"] for t in e["top_logprobs"]] for e in c["logprobs"]["content"]] for c in ref["choices"]]
    assert [[[t["token"] for t in e["top_logprobs"]] for e in c["logprobs"]["content"]] for c in got["choices"]] == tops
    assert [c.sampling["constraint"] for c in two.registry.get("m").calls] == ["json_object"] * 2


def test_a_weight_push_reaches_both_engines(pair):
    (one, s1), (two, s2, pool), model = pair
    start(two, "g", "h")
    before = tokens(call(s1, seed=3))[0]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.5)
        assert pool.sync(model, 5) and not pool.sync(model, 5)  # the second is already held: nothing sent
        ref = tokens(call(s1, seed=3))[0]  # the in-process engine shares `model`
        assert ref != before
        for e in ("g", "h"):
            body = call(s2, e, seed=3)
            assert tokens(body)[0] == ref and body["tracerl"]["policy_version"] == 5
    finally:
        model.load_state_dict(state)
    two.load_weights(state, 6)  # what POST /v1/weights does: checked, then sent to every engine
    assert tokens(call(s2, "g", seed=3))[0] == before and call(s2, "h", seed=3)["tracerl"]["policy_version"] == 6


def test_a_dead_engine_s_call_is_retried_on_the_other_and_it_is_replaced(pair):
    (one, s1), (two, s2, pool), _ = pair
    start(two, "k")
    ref = tokens(call(s1, seed=11))[0]
    victim = call(s2, "k", seed=0)["tracerl"]["engine"]
    old = pool.engines[victim]
    os.kill(old.pid, signal.SIGSTOP)  # the next call waits in its queue ...
    out = {}
    t = threading.Thread(target=lambda: out.__setitem__("r", call(s2, "k", seed=11)))
    t.start()
    deadline = time.time() + 10
    while pool.inflight[victim] == 0 and time.time() < deadline:
        time.sleep(0.02)
    assert pool.inflight[victim] == 1
    os.kill(old.pid, signal.SIGKILL)  # ... and dies with it in flight
    t.join(30)
    body = out["r"]
    assert body["tracerl"]["engine"] == 1 - victim and tokens(body)[0] == ref  # retried: same seed, same tokens
    assert pool.counters == {"engine_deaths": 1, "calls_retried": 1}
    assert [c.engine for c in two.registry.get("k").calls] == [victim, 1 - victim]
    deadline = time.time() + 60
    while not pool.live[victim] and time.time() < deadline:  # replaced in the background
        time.sleep(0.1)
    fresh = pool.engines[victim]
    assert pool.live[victim] and fresh is not old and fresh.pid != old.pid
    rows = fresh.sample(two.tokenizer.encode(PROMPT), 8, {"temperature": 1.0, "top_p": 1.0, "top_k": 0}, (), 11, ())
    assert rows[0][1] == pool.version == 6  # it took the current weights before its first call

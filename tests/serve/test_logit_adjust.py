"""`logit_bias`, `presence_penalty`, `frequency_penalty` change the distribution sampled from and the recorded
log-prob is under it; `user` / `metadata` are recorded on the span; fields the gateway cannot honour are refused."""

import json
import math

import httpx
import pytest
import torch

from tracerl.rollout import TorchEngine
from tracerl.serve.constrained import constrained_generate
from tracerl.serve.penalties import LogitAdjust

PROMPT = [5, 17, 42, 9]


def test_adjustment_by_hand_on_four_tokens():
    # counts of the row's tokens so far: token 2 twice, token 1 once; bias +1 on token 3
    # token 0: 0; token 1: -0.5*1 - 0.25 = -0.75; token 2: -0.5*2 - 0.25 = -1.25; token 3: +1
    adj = LogitAdjust({3: 1.0}, presence=0.25, frequency=0.5)
    out = adj.apply(torch.zeros(2, 4), [[2, 2, 1], []])
    assert out[0].tolist() == [0.0, -0.75, -1.25, 1.0] and out[1].tolist() == [0.0, 0.0, 0.0, 1.0]
    # log-prob of token 2 in row 0: -1.25 - log(1 + e^-0.75 + e^-1.25 + e^1)
    #   = -1.25 - log(1 + 0.4724 + 0.2865 + 2.7183) = -1.25 - log(4.4771) = -1.25 - 1.4990 = -2.7490
    assert torch.log_softmax(out[0], -1)[2].item() == pytest.approx(-2.7490, abs=1e-4)


def test_no_pattern_no_adjustment_is_the_engines_reference_loop(tiny):
    _, _, model, tok = tiny
    engine = TorchEngine(model, tok)
    kw = dict(temperature=1.0, top_p=0.9, top_k=0, stop_strings=("</answer>",), stop_token_ids=[tok.eos_token_id])
    ref = engine.generate_reference([PROMPT, PROMPT[:2]], max_new_tokens=[12, 7],
                                    generator=torch.Generator().manual_seed(3), **kw)
    got = constrained_generate(engine, [PROMPT, PROMPT[:2]], [None, None], budgets=[12, 7],
                               generator=torch.Generator().manual_seed(3), **kw)
    for r, (g, _) in zip(ref, got):
        assert g.token_ids == r.token_ids and g.finish == r.finish
        assert g.logprobs == pytest.approx(r.logprobs, abs=1e-5)


def _complete(client, **kw):
    kw = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "logprobs": 1, "temperature": 1.0, **kw}
    return client.completions.create(**kw)


def test_bias_plus_100_forces_a_token_and_minus_100_bans_it(client):
    for seed in range(3):
        r = _complete(client, logit_bias={"77": 100}, seed=seed)
        assert r.choices[0].model_extra["token_ids"] == [77] * 8
        assert all(lp == pytest.approx(0.0, abs=1e-6) for lp in r.choices[0].logprobs.token_logprobs)
    r = _complete(client, logit_bias={"77": 100}, n=3)  # the n>1 batch applies it to every row
    assert [c.model_extra["token_ids"] for c in r.choices] == [[77] * 8] * 3
    free = _complete(client, n=8, max_tokens=12, seed=1)
    counts = {}
    for c in free.choices:
        for t in c.model_extra["token_ids"]:
            counts[t] = counts.get(t, 0) + 1
    common = max(counts, key=counts.get)  # the token this prompt samples most without a bias
    banned = _complete(client, n=8, max_tokens=12, seed=1, logit_bias={str(common): -100})
    assert all(common not in c.model_extra["token_ids"] for c in banned.choices)


def _rescore(model, ids, completion, *, freq=0.0, bias=None):
    """Each completion token's log-prob under softmax(logits + bias - freq * count so far) at temperature 1."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids + completion[:-1]])).logits[0, len(ids) - 1:].float()
    adj = LogitAdjust(bias or {}, frequency=freq)
    return [torch.log_softmax(adj.apply(logits[t:t + 1], [completion[:t]])[0], -1)[c].item()
            for t, c in enumerate(completion)]


def test_frequency_penalty_changes_the_distribution_and_the_recorded_logprob_is_of_it(client, tiny):
    _, _, model, _ = tiny
    bias = {"77": 8.0, "91": 8.0}  # two likely tokens, so the sample repeats them
    plain = _complete(client, max_tokens=10, seed=5, logit_bias=bias)
    ids = plain.choices[0].model_extra["token_ids"]
    assert len(set(ids)) < len(ids)  # a repeated token: the penalty has something to act on
    num_bias = {int(k): v for k, v in bias.items()}
    assert plain.choices[0].logprobs.token_logprobs == pytest.approx(_rescore(model, PROMPT, ids, bias=num_bias), abs=1e-4)
    pen = _complete(client, max_tokens=10, seed=5, logit_bias=bias, frequency_penalty=2.0)
    pids, plps = pen.choices[0].model_extra["token_ids"], pen.choices[0].logprobs.token_logprobs
    assert plps == pytest.approx(_rescore(model, PROMPT, pids, freq=2.0, bias=num_bias), abs=1e-4)
    # the same tokens scored without the penalty differ wherever a token repeats: the distribution changed
    unpen = _rescore(model, PROMPT, pids, bias=num_bias)
    repeats = [t for t in range(len(pids)) if pids[t] in pids[:t]]
    assert repeats or pids != ids
    for t in repeats:  # a repeated token lost 2.0 of logit per earlier use: another log-prob than unpenalised
        assert abs(plps[t] - unpen[t]) > 0.1
    assert pids.count(77) + pids.count(91) <= ids.count(77) + ids.count(91)


def test_user_and_metadata_are_on_the_span_and_bad_fields_are_refused(client, gateway, tmp_path):
    gw, srv = gateway
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       user="agent-7", metadata={"run": "r1"}, store=False, service_tier="auto",
                                       presence_penalty=0.5)
    span = r.model_extra["tracerl"]["span_id"]
    [rec] = [json.loads(x) for x in (tmp_path / "spans.jsonl").read_text().splitlines() if span in x]
    assert rec["user"] == "agent-7" and rec["metadata"] == {"run": "r1"}
    assert rec["sampling"]["presence_penalty"] == 0.5 and rec["sampling"]["frequency_penalty"] == 0.0
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for extra, named in (({"temprature": 0.5}, "'temprature'"), ({"store": True}, "'store'"),
                         ({"service_tier": "flex"}, "'service_tier'"), ({"reasoning_effort": "low"}, "'reasoning_effort'"),
                         ({"logit_bias": {"hello": 5}}, "'hello'"), ({"logit_bias": {"100000": 5}}, "'100000'")):
        out = httpx.post(srv.base_url + "/chat/completions", json={**body, **extra}, timeout=30)
        assert out.status_code == 400 and named in out.json()["error"]["message"], (extra, out.text)
    assert not any("temprature" in x for x in (tmp_path / "spans.jsonl").read_text().splitlines())


def test_skip_special_tokens_false_keeps_them_in_the_text(client, tiny):
    _, _, _, tok = tiny
    special = next(i for i in tok.all_special_ids if i != tok.eos_token_id and i != tok.pad_token_id)
    r = _complete(client, max_tokens=3, logit_bias={str(special): 100}, extra_body={"skip_special_tokens": False})
    assert r.choices[0].text == tok.decode([special]) * 3
    assert _complete(client, max_tokens=3, logit_bias={str(special): 100}).choices[0].text == ""
    assert math.isfinite(r.choices[0].logprobs.token_logprobs[0])

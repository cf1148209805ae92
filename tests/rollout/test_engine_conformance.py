"""Every rollout engine passes the `Engine` contract (rollout/engine_api.py, docs/engines.md).

Engines: the torch engine on the learner's module (`torch`), the torch engine on a copy synced by
`load_weights` (`torch_copy`), Hugging Face `generate` on a copy (`hf`), the remote engine against
a real `tracerl serve` HTTP server on 127.0.0.1 that accepts weight pushes (`remote`), and vLLM
(`vllm`, marked gpu: skipped without vLLM and a CUDA device). Each gets its own learner (a copy of
the session's tiny model), so a weight-sync test changes nobody else's weights; the engine lives for
the module (one server start), and the weight-sync test, last, leaves learner and engine in sync.

What is checked, on one tiny untrained model (every next-token distribution is wide, so sampled
tokens vary): shapes; behavior log-probs equal the learner's rescoring of the same tokens under the
processed distribution (temperature 0.8, top-p 0.9; greedy: log-prob 0 and the learner's argmax);
stop token ids and multi-token stop strings end a row at the first stop, kept as its last token;
per-row budgets; the same seed gives the same tokens, another seed others; sessions over two
turns give what `generate` on the full sequences gives; a weight sync changes the outputs, the
version, and the log-probs follow the learner's new weights.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tracerl.algorithms.logprobs import chunked_token_scores
from tracerl.rollout.engine_api import Engine, owns_weights, sync_weights
from tracerl.rollout.stops import StopRules
from tracerl.train.batch import pad_batch

ENGINES = ["torch", "torch_copy", "hf", "remote", pytest.param("vllm", marks=pytest.mark.gpu)]
# |engine - learner| log-prob: the KV-cache forward and the learner's full forward differ in float32 rounding
TOL = {"torch": 1e-4, "torch_copy": 1e-4, "hf": 1e-4, "remote": 1e-4, "vllm": 2e-3}
SAMPLING = dict(temperature=0.8, top_p=0.9, top_k=0)


@pytest.fixture(scope="module", params=ENGINES)
def setup(request, tiny, tiny_dir):
    """(name, engine, learner model, tokenizer); servers and engines are closed at teardown."""
    from tracerl.rollout import TorchEngine

    model, tok = tiny
    learner = copy.deepcopy(model)
    name, closers = request.param, []
    if name == "torch":
        engine = TorchEngine(learner, tok)
    elif name == "torch_copy":
        engine = TorchEngine(copy.deepcopy(learner), tok, owns_weights=True)
    elif name == "hf":
        from tracerl.rollout.hf_engine import HFGenerateEngine

        engine = HFGenerateEngine.from_learner(learner, tok)
    elif name == "remote":
        pytest.importorskip("fastapi")
        from tracerl.rollout.remote_engine import RemoteEngine
        from tracerl.serve import Gateway
        from tracerl.serve.server import ServerThread

        gw = Gateway(TorchEngine(copy.deepcopy(learner), tok), model_name="tiny", accept_weights=True,
                     api_keys=("conformance-key",))  # weight pushes need a key
        srv = ServerThread(gw).start()
        engine = RemoteEngine(srv.base_url, "tiny", tok, api_key="conformance-key")
        closers += [engine.close, srv.stop, gw.close]
    else:
        from tracerl.rollout.vllm_engine import VLLMEngine, vllm_problem

        if vllm_problem():
            pytest.skip(vllm_problem())
        engine = VLLMEngine.build(str(tiny_dir), tok, dtype="float32", seed=0, gpu_memory_utilization=0.2,
                                  max_model_len=256, enforce_eager=True)
    yield name, engine, learner, tok
    for close in closers:
        close()


def _prompts(tok):
    return [tok("Ann has 3 apples.")["input_ids"], tok("What is 12 + 7?")["input_ids"][:3],
            tok("Use <code> to compute.")["input_ids"]]


@torch.no_grad()
def _learner_scores(model, prompts, samples, *, temperature, top_p, top_k, pad_id):
    """The learner's log-prob of every sampled token (full forward, right padding, processed distribution)."""
    seqs = [list(p) + s.token_ids for p, s in zip(prompts, samples)]
    ids, attn = pad_batch(seqs, pad_id)
    logits = model(input_ids=ids, attention_mask=attn).logits.float()
    out, argmax = [], []
    for i, (p, s) in enumerate(zip(prompts, samples)):
        pos = torch.arange(len(p) - 1, len(p) - 1 + len(s.token_ids))
        z = logits[i, pos]
        argmax.append(z.argmax(-1).tolist())
        lp, _, _ = chunked_token_scores(z, torch.tensor(s.token_ids), temperature=temperature or 1.0,
                                        top_p=top_p, top_k=top_k)
        out.append(lp.tolist())
    return out, argmax


def _flat(samples):
    return [x for s in samples for x in s.logprobs]


def _gen(engine, prompts, seed=0, **kw):
    kw = {"max_new_tokens": 8, **SAMPLING, **kw}
    return engine.generate(prompts, generator=torch.Generator().manual_seed(seed), **kw)


def test_satisfies_the_protocol_and_shapes(setup):
    name, engine, _, tok = setup
    assert isinstance(engine, Engine), name
    prompts = _prompts(tok)
    out = _gen(engine, prompts)
    assert len(out) == len(prompts)
    for s in out:
        assert len(s.token_ids) == len(s.logprobs) == 8 and s.finish == "length"
        assert len(s.entropies) in (0, len(s.token_ids))
        assert all(isinstance(t, int) and 0 <= t < len(tok) for t in s.token_ids)
        assert all(math.isfinite(x) and x <= 0.0 for x in s.logprobs)


def test_logprobs_are_the_learners_rescoring(setup):
    name, engine, learner, tok = setup
    prompts = _prompts(tok)
    out = _gen(engine, prompts, seed=3)
    want, _ = _learner_scores(learner, prompts, out, pad_id=engine.pad_id, **SAMPLING)
    for s, w in zip(out, want):
        assert max(abs(a - b) for a, b in zip(s.logprobs, w)) < TOL[name], (name, s.logprobs, w)


def test_greedy_is_the_learners_argmax_with_logprob_zero(setup):
    name, engine, learner, tok = setup
    prompts = _prompts(tok)
    out = engine.generate(prompts, max_new_tokens=6, temperature=0.0)
    _, argmax = _learner_scores(learner, prompts, out, temperature=0.0, top_p=1.0, top_k=0, pad_id=engine.pad_id)
    for s, a in zip(out, argmax):
        assert s.token_ids == a and s.logprobs == [0.0] * 6, name


def _first_stop(rule, ids):
    """Index of the first token at which `rule` stops the row (the reference cut)."""
    return next(j for j in range(len(ids)) if rule(ids[:j + 1], ids[j]))


def test_stop_token_ids_and_stop_strings_end_a_row_at_the_first_stop(setup):
    name, engine, _, tok = setup
    prompts = _prompts(tok)
    free = _gen(engine, prompts, seed=5, max_new_tokens=12)
    row = free[0].token_ids
    k = next(j for j in range(2, len(row)) if row[j] not in row[:j])  # a token first seen at position k >= 2
    got = _gen(engine, prompts, seed=5, max_new_tokens=12, stop_token_ids=[row[k]])
    assert got[0].token_ids == row[:k + 1] and got[0].finish == "stop", name
    # a stop string spanning two tokens: cut where the shared stop rule (rollout/stops.py) first fires
    text = tok.decode(row[k - 1:k + 1], skip_special_tokens=False)
    rules = StopRules(tok)
    assert rules.single_token_stops((text,)) is None and text.strip(), text  # really a multi-token stop
    j = _first_stop(rules.rule((text,), ()), row)
    got = _gen(engine, prompts, seed=5, max_new_tokens=12, stop_strings=(text,))
    assert got[0].token_ids == row[:j + 1] and got[0].finish == "stop", (name, text)


def test_per_row_budgets(setup):
    name, engine, _, tok = setup
    out = _gen(engine, _prompts(tok), max_new_tokens=[3, 7, 1])
    assert [len(s.token_ids) for s in out] == [3, 7, 1] and {s.finish for s in out} == {"length"}, name


def test_same_seed_same_tokens_other_seed_other_tokens(setup):
    name, engine, _, tok = setup
    prompts = _prompts(tok)
    a, b, c = _gen(engine, prompts, seed=7), _gen(engine, prompts, seed=7), _gen(engine, prompts, seed=8)
    assert [s.token_ids for s in a] == [s.token_ids for s in b], name
    assert _flat(a) == pytest.approx(_flat(b), abs=1e-6)
    assert [s.token_ids for s in a] != [s.token_ids for s in c], name  # 24 draws from a near-uniform vocabulary


def test_a_session_over_two_turns_gives_what_generate_gives(setup):
    name, engine, _, tok = setup
    prompts = _prompts(tok)[:2]
    session = engine.open_session()
    first = session.generate([0, 1], prompts, max_new_tokens=4, generator=torch.Generator().manual_seed(1), **SAMPLING)
    obs = tok("<output>7</output>", add_special_tokens=False)["input_ids"]
    seqs = [list(p) + s.token_ids + obs for p, s in zip(prompts, first)]
    second = session.generate([0, 1], seqs, max_new_tokens=4, generator=torch.Generator().manual_seed(2), **SAMPLING)
    direct = _gen(engine, seqs, seed=2, max_new_tokens=4)
    assert [s.token_ids for s in second] == [s.token_ids for s in direct], name
    assert _flat(second) == pytest.approx(_flat(direct), abs=TOL[name])


def test_a_weight_sync_changes_the_outputs_and_the_version(setup):
    name, engine, learner, tok = setup
    prompts = _prompts(tok)
    before = engine.generate(prompts, max_new_tokens=6, temperature=0.0)
    with torch.no_grad():  # an "update": a large, deterministic change of the learner's weights
        g = torch.Generator().manual_seed(0)
        for p in learner.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    copied = sync_weights(engine, learner, 5)
    assert copied == owns_weights(engine) == (name != "torch")
    assert engine.version == 5
    after = engine.generate(prompts, max_new_tokens=6, temperature=0.0)
    assert [s.token_ids for s in after] != [s.token_ids for s in before], name
    out = _gen(engine, prompts, seed=4)
    want, _ = _learner_scores(learner, prompts, out, pad_id=engine.pad_id, **SAMPLING)
    for s, w in zip(out, want):  # the engine samples the learner's new weights, not merely other ones
        assert max(abs(a - b) for a, b in zip(s.logprobs, w)) < TOL[name], name

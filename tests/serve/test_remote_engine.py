"""The remote engine samples through an OpenAI-compatible server (here `tracerl serve` on 127.0.0.1)
and gets exactly what the in-process engine samples for the same seeds; the agent loop runs on it."""

import math

import pytest
import torch

from tracerl.rollout.agent_loop import LoopBudgets, run_episodes
from tracerl.rollout.remote_engine import RemoteEngine, RemoteEngineError
from tracerl.rollout.render import render_prompt


@pytest.fixture
def remote(gateway):
    gw, srv = gateway
    eng = RemoteEngine(srv.base_url, "tiny", gw.tokenizer)
    yield gw, eng
    eng.close()


def test_rows_match_the_in_process_engine_seed_for_seed(remote):
    gw, eng = remote
    tok = gw.tokenizer
    prompts = [render_prompt(tok, [{"role": "user", "content": q}])[0] for q in ("Ann has 3 coins.", "Bo gets 4 more.", "How many?")]
    kw = dict(max_new_tokens=[6, 9, 4], temperature=0.8, top_p=0.9, top_k=0, stop_strings=gw.stop_strings,  # the server adds its own stops to every call
              stop_token_ids=[tok.eos_token_id])
    got = eng.generate(prompts, generator=torch.Generator().manual_seed(11), **kw)
    seeds = torch.randint(0, 2**31 - 1, (3,), generator=torch.Generator().manual_seed(11)).tolist()
    for p, b, s, g in zip(prompts, kw["max_new_tokens"], seeds, got):
        want = gw.engine.generate([p], **{**kw, "max_new_tokens": b}, generator=torch.Generator().manual_seed(s))[0]
        assert g.token_ids == want.token_ids and g.finish == want.finish, (b, len(g.token_ids), want)
        assert all(math.isclose(a, b2, abs_tol=1e-6) for a, b2 in zip(g.logprobs, want.logprobs))
        assert g.policy_version == 0


def test_the_agent_loop_runs_on_the_remote_engine(remote, tiny):
    gw, eng = remote
    spec, tasks, _, _ = tiny
    trajs = run_episodes(eng, spec, tasks[:3], ["a", "a", "b"], budgets=LoopBudgets(max_turns=2, max_tokens=500, max_new_tokens=8),
                         sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}, policy_version=0, seed=0,
                         generator=torch.Generator().manual_seed(0))
    assert len(trajs) == 3 and all(t.num_action_tokens > 0 for t in trajs)


def test_version_tags_and_refusals(remote):
    gw, eng = remote
    gw.set_policy_version(3)
    assert eng.generate([[5, 6, 7]], max_new_tokens=2)[0].policy_version == 3
    eng.set_version(2, expect=True)
    with pytest.raises(RemoteEngineError, match="policy version 3, expected 2"):
        eng.generate([[5, 6, 7]], max_new_tokens=2)
    eng.set_version(3, expect=True)
    with pytest.raises(RemoteEngineError, match="context_length|context is 512"):
        eng.generate([[5, 6, 7]], max_new_tokens=5000)

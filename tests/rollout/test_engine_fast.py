"""The fast engine path (shared prompt prefill, preallocated cache, stopped rows leave the batch,
KV kept across turns) reproduces the plain reference loop token for token under one seed."""

import dataclasses

import pytest
import torch

from tracerl.envs import get_env
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.rollout.kv_session import GenerationSession


def _prompts(tok):
    texts = ["Ann has 3 apples.", "Bo has 12 coins. Bo gets 4 more. How many coins does Bo have?", "7"]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def _same(fast, ref, atol=1e-5):
    assert len(fast) == len(ref)
    for f, r in zip(fast, ref):
        assert f.token_ids == r.token_ids and f.finish == r.finish
        assert max((abs(a - b) for a, b in zip(f.logprobs, r.logprobs)), default=0.0) < atol
        assert max((abs(a - b) for a, b in zip(f.entropies, r.entropies)), default=0.0) < atol


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.0, 1.0, 20), (0.0, 1.0, 0)])
def test_generate_matches_reference_on_a_group_batch(tiny, temperature, top_p, top_k):
    model, tok = tiny
    engine = TorchEngine(model, tok)
    # groups of 4 identical prompts (shared prefill) of different lengths, uneven budgets (rows stop apart)
    prompts = [p for p in _prompts(tok) for _ in range(4)]
    budgets = [3, 17, 9, 12] * 3
    stop = [tok.convert_tokens_to_ids("</code>"), tok.eos_token_id]
    kw = dict(max_new_tokens=budgets, temperature=temperature, top_p=top_p, top_k=top_k, stop_token_ids=stop)
    ref = engine.generate_reference(prompts, generator=torch.Generator().manual_seed(3), **kw)
    fast = engine.generate(prompts, generator=torch.Generator().manual_seed(3), **kw)
    _same(fast, ref)
    assert [len(s.token_ids) <= b for s, b in zip(fast, budgets)] == [True] * 12


def test_session_reuses_the_cache_across_turns_with_reference_results(tiny):
    """Three turns: each turn's sequence is the last one, its sample, and an 'observation'."""
    model, tok = tiny
    engine = TorchEngine(model, tok)
    session = GenerationSession(engine)
    seqs = [p for p in _prompts(tok) for _ in range(2)]
    keys = list(range(len(seqs)))
    g_fast, g_ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    obs = [tok(t, add_special_tokens=False)["input_ids"] for t in ["<output>12</output>", "ok", "<output>7</output> x"]]
    for turn in range(3):
        budgets = [6 + 3 * ((i + turn) % 3) for i in range(len(seqs))]
        fast = session.generate(keys, seqs, max_new_tokens=budgets, generator=g_fast)
        ref = engine.generate_reference(seqs, max_new_tokens=budgets, generator=g_ref)
        _same(fast, ref)
        seqs = [s + f.token_ids + obs[(i + turn) % 3] for i, (s, f) in enumerate(zip(seqs, fast))]
        if turn == 1:  # an episode ends: it leaves the session; the rest keep their caches
            keys, seqs = keys[1:], seqs[1:]
    # only the new tokens were fed after the first turn: the two groups' prompts were fed once each
    # (3 distinct prompts), then per row 1 last action token + its observation per later turn
    first = sum(len(p) for p in _prompts(tok))
    later = sum(1 + len(obs[(i + 0) % 3]) for i in range(6)) + sum(1 + len(obs[(i + 1) % 3]) for i in range(1, 6))
    assert session.stats["fed_tokens"] == first + later


def test_a_row_whose_sequence_diverged_is_refed_whole(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok)
    session = GenerationSession(engine)
    p = _prompts(tok)
    session.generate([0, 1], [p[0], p[1]], max_new_tokens=4, generator=torch.Generator().manual_seed(0))
    # row 0 comes back with a different history (not an extension of what was cached)
    seqs = [p[2] + p[0], p[1] + [5, 6]]
    fast = session.generate([0, 1], seqs, max_new_tokens=5, generator=torch.Generator().manual_seed(1))
    ref = engine.generate_reference(seqs, max_new_tokens=5, generator=torch.Generator().manual_seed(1))
    _same(fast, ref)


def test_agent_loop_fast_and_plain_engines_give_the_same_trajectories(tiny):
    """math_tool through the agent loop (real sandbox tool calls), 2 tasks x 4 samples, 3 turns."""
    model, tok = tiny
    spec = get_env("math_tool")
    tasks = spec.generate("train", 2, 0)
    batch = [t for t in tasks for _ in range(4)]
    groups = [f"g{i // 4}" for i in range(len(batch))]
    budgets = LoopBudgets(max_turns=3, max_tokens=200, max_new_tokens=24)
    out = {}
    for fast in (True, False):
        engine = TorchEngine(model, tok, fast=fast)
        out[fast] = run_episodes(engine, spec, batch, groups, budgets=budgets, sampling={"temperature": 1.0,
                                 "top_p": 1.0, "top_k": 0}, policy_version=0, seed=11,
                                 generator=torch.Generator().manual_seed(11))
    for f, r in zip(out[True], out[False]):
        assert f.token_ids == r.token_ids and list(f.roles) == list(r.roles)
        assert f.terminal_reason == r.terminal_reason and f.reward == r.reward
        fl = torch.tensor(f.behavior_logprobs, dtype=torch.float64)
        rl = torch.tensor(r.behavior_logprobs, dtype=torch.float64)
        both = ~torch.isnan(rl)
        assert torch.equal(both, ~torch.isnan(fl)) and (fl[both] - rl[both]).abs().max() < 1e-5


def test_a_replaced_generate_is_played_through_generate(tiny):
    model, tok = tiny

    class Scripted(TorchEngine):
        def generate(self, prompts, **kw):
            return [dataclasses.replace(s) for s in super().generate_reference(prompts, **kw)]

    assert type(Scripted(model, tok).open_session()).__name__ == "StatelessSession"
    assert type(TorchEngine(model, tok).open_session()).__name__ == "GenerationSession"
    assert type(TorchEngine(model, tok, fast=False).open_session()).__name__ == "StatelessSession"


def test_grouped_query_attention_model_matches_reference(tiny):
    """Two query heads per key/value head (as in SmolLM2): the session's cache and mask still agree."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = tiny
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)).eval()
    engine = TorchEngine(model, tok)
    session = GenerationSession(engine)
    seqs = [p for p in _prompts(tok) for _ in range(2)]
    g_fast, g_ref = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    for _ in range(2):
        fast = session.generate(list(range(6)), seqs, max_new_tokens=[4, 9, 6, 8, 3, 7], generator=g_fast)
        _same(fast, engine.generate_reference(seqs, max_new_tokens=[4, 9, 6, 8, 3, 7], generator=g_ref))
        seqs = [s + f.token_ids + [5, 6, 7] for s, f in zip(seqs, fast)]


def test_without_the_cache_layer_api_the_engine_uses_the_plain_loop(tiny, monkeypatch):
    """transformers older than the cache-layer API (4.56): the reference loop, same results."""
    import tracerl.rollout.engine as engine_mod

    model, tok = tiny
    monkeypatch.setattr(engine_mod, "_fast_session", lambda: None)
    engine = TorchEngine(model, tok)
    assert type(engine.open_session()).__name__ == "StatelessSession"
    prompts = _prompts(tok)
    got = engine.generate(prompts, max_new_tokens=6, generator=torch.Generator().manual_seed(4))
    _same(got, engine.generate_reference(prompts, max_new_tokens=6, generator=torch.Generator().manual_seed(4)),
          atol=1e-12)  # the very same loop: identical

"""Chunked token log-probabilities/entropies ≡ the naive full-vocabulary computation; the CLI listing."""

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms import registry
from tracerl.algorithms.logprobs import naive_token_logprobs_and_entropy, token_logprobs_and_entropy

D = torch.float64


def test_uniform_and_one_hot_by_hand():
    # 4 equal logits: log p = −ln 4 for any target, entropy = ln 4
    lp, ent = token_logprobs_and_entropy(torch.zeros(1, 2, 4, dtype=D), torch.tensor([[0, 3]]), chunk_size=1)
    torch.testing.assert_close(lp, torch.full((1, 2), -math.log(4), dtype=D))
    torch.testing.assert_close(ent, torch.full((1, 2), math.log(4), dtype=D))
    # logits [ln 3, 0] → p = [0.75, 0.25]; temperature 1: log p(0) = ln 0.75, H = −(.75 ln .75 + .25 ln .25) = 0.5623
    logits = torch.tensor([[[math.log(3), 0.0]]], dtype=D)
    lp, ent = token_logprobs_and_entropy(logits, torch.tensor([[0]]))
    assert lp.item() == pytest.approx(math.log(0.75))
    assert ent.item() == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    # temperature 2 halves the logits: [ln 3 / 2, 0] → p(0) = √3/(√3+1) = 0.6340
    lp, _ = token_logprobs_and_entropy(logits, torch.tensor([[0]]), temperature=2.0)
    assert lp.item() == pytest.approx(math.log(math.sqrt(3) / (math.sqrt(3) + 1)))


def test_ignored_targets_give_zero():
    lp, _ = token_logprobs_and_entropy(torch.randn(1, 3, 5), torch.tensor([[1, -100, 2]]), chunk_size=2)
    assert lp[0, 1].item() == 0.0 and lp[0, 0].item() < 0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(2, 17), st.integers(1, 8), st.sampled_from([1.0, 0.7]),
       st.booleans(), st.integers(0, 2**31 - 1))
def test_chunked_equals_naive(B, T, V, chunk, temperature, use_head, seed):
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, V, (B, T), generator=g)
    if use_head:
        head = torch.nn.Linear(6, V, bias=True).to(D)
        x = torch.randn(B, T, 6, dtype=D, generator=g)
        kw = {"lm_head": head}
    else:
        x = torch.randn(B, T, V, dtype=D, generator=g) * 3
        kw = {}
    a_lp, a_ent = token_logprobs_and_entropy(x, targets, chunk_size=chunk, temperature=temperature, **kw)
    b_lp, b_ent = naive_token_logprobs_and_entropy(x, targets, temperature=temperature, **kw)
    torch.testing.assert_close(a_lp, b_lp, rtol=0, atol=1e-12)
    torch.testing.assert_close(a_ent, b_ent, rtol=0, atol=1e-12)


def test_gradcheck_chunked_through_checkpointing():
    torch.manual_seed(0)
    h = torch.randn(2, 3, 4, dtype=D, requires_grad=True)
    w = torch.randn(7, 4, dtype=D, requires_grad=True)
    targets = torch.randint(0, 7, (2, 3))

    def f(h, w):
        lp, ent = token_logprobs_and_entropy(h, targets, lm_head=w, chunk_size=4, temperature=0.9)
        return lp.sum() + 0.5 * ent.sum()

    assert torch.autograd.gradcheck(f, (h, w))
    logits = torch.randn(2, 3, 7, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda z: token_logprobs_and_entropy(z, targets, chunk_size=5)[0].sum(), (logits,))


def test_cli_lists_every_registered_name(capsys):
    from tracerl.cli import main

    assert main(["algorithms", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed] == registry.names()
    assert all(e["description"] and e["source"] and e["kind"] for e in listed)
    assert main(["algorithms"]) == 0
    text = capsys.readouterr().out
    for entry in registry.entries():
        assert entry.name in text and entry.source in text
    assert main(["algorithms", "--kind", "kl", "--json"]) == 0
    assert [e["name"] for e in json.loads(capsys.readouterr().out)] == ["k1", "k2", "k3"]
    assert main(["algorithms", "--kind", "nope"]) == 2


def test_issue_list_is_registered():
    required = {
        "grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae", "gae_decoupled", "vapo_gae",
        "prime", "gigpo", "mopd", "policy_loss", "decoupled_ppo", "tis", "mis", "value_loss", "k1", "k2", "k3",
        "kl_loss", "positive_nll", "clip_cov", "kl_cov", "mopd_loss", "overlong_penalty", "length_bonus",
        "dynamic_sampling", "resample_on_correct", "magic_entropy", "pass_at_k",
    }
    assert required <= set(registry.names())
    # helpers are plain functions, not user-facing entries
    assert not {"aggregate", "token_logprobs_and_entropy", "checkpoint_reward"} & set(registry.names())

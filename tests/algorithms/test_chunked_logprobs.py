"""The learner's chunked log-probs and entropies equal the plain full-vocabulary computation, values and
gradients, with the chunk capped by `CHUNK_ELEMENTS` (fewer rows per chunk at a larger vocabulary)."""

import pytest
import torch

from tracerl.algorithms import logprobs
from tracerl.algorithms.logprobs import chunk_rows, chunked_token_scores, naive_token_logprobs_and_entropy


def test_chunk_rows_caps_the_logits_per_chunk():
    # 2**23 logits a chunk: 170 rows at SmolLM2's 49,152 (2**23 / 49152 = 170.67), 55 at Qwen's 151,936;
    # a small vocabulary keeps chunk_size (the tiny recipes: 1024 rows, bit for bit as before)
    assert chunk_rows(1024, 49_152) == 170 and chunk_rows(1024, 151_936) == 55 and chunk_rows(1024, 518) == 1024
    assert chunk_rows(1024, 2**24) == 1  # never 0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_scores_and_gradients_equal_the_plain_computation(monkeypatch, temperature):
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", 3 * 40)  # V = 40: 3 positions a chunk, 23 positions → 8 chunks
    g = torch.Generator().manual_seed(0)
    N, H, V = 23, 16, 40
    # float64 (kept so by the chunked path): the comparison is of the chunking, not of float32 rounding
    h1 = torch.randn(N, H, generator=g, dtype=torch.float64, requires_grad=True)
    w1 = torch.randn(V, H, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, V, (N,), generator=g)
    h2, w2 = h1.detach().clone().requires_grad_(True), w1.detach().clone().requires_grad_(True)
    calls = []
    real = logprobs._from_hidden
    monkeypatch.setattr(logprobs, "_from_hidden", lambda h, *a: calls.append(h.shape[0]) or real(h, *a))
    lp, ent, _ = chunked_token_scores(h1, t, lm_head=w1, chunk_size=1024, temperature=temperature)
    assert calls[:8] == [3] * 7 + [2]  # the cap, not chunk_size, set the chunks (backward recomputes them)
    lp_ref, ent_ref = naive_token_logprobs_and_entropy(h2[None], t[None], lm_head=w2, temperature=temperature)
    assert torch.allclose(lp, lp_ref[0], atol=1e-6) and torch.allclose(ent, ent_ref[0], atol=1e-6)
    c = torch.linspace(-1, 1, N, dtype=torch.float64)
    (lp * c + 0.3 * ent).sum().backward()
    (lp_ref[0] * c + 0.3 * ent_ref[0]).sum().backward()
    assert torch.allclose(h1.grad, h2.grad, atol=1e-6) and torch.allclose(w1.grad, w2.grad, atol=1e-6)

"""The learner's chunked log-probs and entropies equal the plain full-vocabulary computation, values and
gradients, with the chunk capped by `CHUNK_ELEMENTS` (fewer rows per chunk at a larger vocabulary)."""

import pytest
import torch

from tracerl.algorithms import fused_head, logprobs
from tracerl.algorithms.logprobs import chunk_rows, chunked_token_scores, naive_token_logprobs_and_entropy


def test_chunk_rows_caps_the_logits_per_chunk():
    # 2**23 logits a chunk: 170 rows at SmolLM2's 49,152 (2**23 / 49152 = 170.67), 55 at Qwen's 151,936;
    # a small vocabulary keeps chunk_size (the tiny recipes: 1024 rows, bit for bit as before)
    assert chunk_rows(1024, 49_152) == 170 and chunk_rows(1024, 151_936) == 55 and chunk_rows(1024, 518) == 1024
    assert chunk_rows(1024, 2**24) == 1  # never 0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_capped_chunks_equal_the_plain_computation(monkeypatch, temperature):
    # the no-gradient path (old / reference log-probs) and a top-k one with gradient (checkpointed chunks)
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", 3 * 40)  # V = 40: 3 positions a chunk, 23 positions → 8 chunks
    g = torch.Generator().manual_seed(0)
    N, H, V = 23, 16, 40
    # float64 (kept so by the chunked path): the comparison is of the chunking, not of float32 rounding
    h = torch.randn(N, H, generator=g, dtype=torch.float64)
    w = torch.randn(V, H, generator=g, dtype=torch.float64)
    t = torch.randint(0, V, (N,), generator=g)
    calls = []
    real = logprobs._from_hidden
    monkeypatch.setattr(logprobs, "_from_hidden", lambda h, *a: calls.append(h.shape[0]) or real(h, *a))
    with torch.no_grad():
        lp, ent, _ = chunked_token_scores(h, t, lm_head=w, chunk_size=1024, temperature=temperature)
    assert calls == [3] * 7 + [2]  # the cap, not chunk_size, set the chunks
    lp_ref, ent_ref = naive_token_logprobs_and_entropy(h[None], t[None], lm_head=w, temperature=temperature)
    assert torch.allclose(lp, lp_ref[0], atol=1e-6) and torch.allclose(ent, ent_ref[0], atol=1e-6)
    # top-k 39 of 40 with gradient: the checkpointed chunks, again 8 of them
    calls.clear()
    hg = h.clone().requires_grad_(True)
    lp_k, _, full = chunked_token_scores(hg, t, lm_head=w, chunk_size=1024, temperature=temperature, top_k=39)
    assert calls == [3] * 7 + [2] and torch.allclose(full, lp_ref[0], atol=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_fused_head_backward_equals_the_plain_computation(monkeypatch, temperature):
    # V = 40 and at most 3·40 logits a chunk: 3 rows < chunk_size 1024, so the hand-written backward
    # (algorithms/fused_head.py) runs; with a bias, targets < 0 (−100 padding) giving log-prob 0
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", 3 * 40)
    g = torch.Generator().manual_seed(1)
    N, H, V = 23, 16, 40
    head = torch.nn.Linear(H, V, dtype=torch.float64)
    h1 = torch.randn(N, H, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, V, (N,), generator=g)
    t[[4, 11]] = -100
    lp, ent, full = chunked_token_scores(h1, t, lm_head=head, temperature=temperature)
    assert type(lp.grad_fn).__name__ == "HeadScoresBackward" and full is lp
    c = torch.linspace(-1, 1, N, dtype=torch.float64)
    (lp * c + 0.3 * ent).sum().backward()
    got = [h1.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()]
    h1.grad = head.weight.grad = head.bias.grad = None
    lp_ref, ent_ref = naive_token_logprobs_and_entropy(h1[None], t[None], lm_head=head, temperature=temperature)
    assert torch.allclose(lp, lp_ref[0], atol=1e-6) and torch.allclose(ent, ent_ref[0], atol=1e-6)
    assert lp[4] == 0 and lp[11] == 0
    (lp_ref[0] * c + 0.3 * ent_ref[0]).sum().backward()
    for a, b in zip(got, [h1.grad, head.weight.grad, head.bias.grad]):
        assert torch.allclose(a, b, atol=1e-6)


def test_fused_head_backward_runs_in_the_forwards_autocast_dtype(monkeypatch):
    # under bf16 autocast the forward's logits are bf16 products; the backward's are too (as autograd's would be),
    # not float32 ones: ∂x = bf16(∂z) @ bf16(W), ∂z = c·(onehot − p) − 0.3·p·(z − lse + H) worked out here
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", 3 * 40)
    monkeypatch.setattr(fused_head, "_VOCAB_BLOCK", 16)  # the weight gradient's product in 3 blocks of the vocabulary
    g = torch.Generator().manual_seed(2)
    N, H, V = 23, 16, 40
    head = torch.nn.Linear(H, V, bias=False)
    x = torch.randn(N, H, generator=g, requires_grad=True)
    t = torch.randint(0, V, (N,), generator=g)
    c = torch.linspace(-1, 1, N)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp, ent, _ = chunked_token_scores(x, t, lm_head=head, temperature=1.0)
    assert type(lp.grad_fn).__name__ == "HeadScoresBackward"
    (lp * c + 0.3 * ent).sum().backward()
    wb = head.weight.detach().bfloat16()
    z = (x.detach().bfloat16() @ wb.t()).float()
    p, lse = torch.softmax(z, -1), torch.logsumexp(z, -1, keepdim=True)
    H_ = (lse - (p * z).sum(-1, keepdim=True))
    dz = c[:, None] * (torch.nn.functional.one_hot(t, V).float() - p) - 0.3 * p * (z - lse + H_)
    gx = (dz.bfloat16() @ wb).float()
    assert torch.allclose(x.grad, gx, rtol=1e-3, atol=1e-5)
    gx32 = dz @ head.weight.detach()  # a float32 product of the backward: further off than bf16 rounding of dz
    assert (x.grad - gx).abs().max() < (x.grad - gx32).abs().max()
    gw = (dz.t().bfloat16() @ x.detach().bfloat16()).float()
    assert torch.allclose(head.weight.grad, gw, rtol=2e-2, atol=1e-3)


def test_fused_head_without_positions_gives_a_zero_weight_gradient():
    # the weight gradient is written by the first chunk's product (not added to zeros): with no positions at
    # all there is no chunk, and the gradient is still a [V, H] zero, as autograd's would be
    head = torch.nn.Linear(16, 40, bias=False)
    x = torch.zeros(0, 16, requires_grad=True)
    lp, ent = fused_head.HeadScores.apply(x, head.weight, None, torch.zeros(0, dtype=torch.long), 1.0, 3)
    (lp.sum() + ent.sum()).backward()
    assert head.weight.grad.shape == (40, 16) and not head.weight.grad.any() and x.grad.shape == (0, 16)

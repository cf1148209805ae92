"""The engine's behavior log-probs are the sampling distribution's, checked against a full pass."""

import math

import pytest
import torch

from tracerl.rollout import TorchEngine
from tracerl.rollout.engine import process_logits
from tracerl.train.batch import pad_batch, token_logprobs


def _prompts(tok):
    texts = ["Ann has 3 apples.", "Bo has 12 coins. Bo gets 4 more. How many coins does Bo have?", "7"]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_logprobs_match_full_forward(tiny, temperature):
    model, tok = tiny
    engine = TorchEngine(model, tok)
    prompts = _prompts(tok)  # different lengths: exercises left padding in the batch
    gen = torch.Generator().manual_seed(0)
    samples = engine.generate(prompts, max_new_tokens=12, temperature=temperature, generator=gen)
    seqs = [p + s.token_ids for p, s in zip(prompts, samples)]
    ids, attn = pad_batch(seqs, tok.pad_token_id)  # right padding, no cache: an independent path
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, attn, temperature=temperature)
    worst = 0.0
    for i, (p, s) in enumerate(zip(prompts, samples)):
        assert len(s.token_ids) == len(s.logprobs) > 0
        for j, blp in enumerate(s.logprobs):
            worst = max(worst, abs(lp[i, len(p) + j].item() - blp))
    assert worst < 1e-4


def test_greedy_is_argmax_with_zero_logprob(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok)
    (p,) = _prompts(tok)[:1]
    (s,) = engine.generate([p], max_new_tokens=5, temperature=0.0)
    ids = torch.tensor([p])
    for t in s.token_ids:
        with torch.no_grad():
            nxt = model(input_ids=ids).logits[0, -1].argmax().item()
        assert nxt == t
        ids = torch.cat([ids, torch.tensor([[t]])], dim=1)
    assert s.logprobs == [0.0] * len(s.token_ids)


def test_top_k_and_top_p_mask_by_hand():
    # probs of logits log([0.5, 0.3, 0.15, 0.05]): top_k=2 keeps {0,1}; top_p=0.7 keeps 0 (0.5 < 0.7)
    # and 1 (mass before it 0.5 < 0.7) but drops 2 (mass before it 0.8 >= 0.7)
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    k = process_logits(logits, temperature=1.0, top_p=1.0, top_k=2)
    assert torch.isinf(k[0, 2:]).all() and torch.isfinite(k[0, :2]).all()
    p = process_logits(logits, temperature=1.0, top_p=0.7, top_k=0)
    assert torch.isfinite(p[0, :2]).all() and torch.isinf(p[0, 2:]).all()
    renorm = torch.softmax(p, -1)[0]
    assert renorm[0].item() == pytest.approx(0.5 / 0.8) and renorm[1].item() == pytest.approx(0.3 / 0.8)


def test_top_p_logprobs_are_under_the_truncated_distribution(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok)
    gen = torch.Generator().manual_seed(1)
    (s,) = engine.generate(_prompts(tok)[:1], max_new_tokens=8, temperature=1.0, top_p=0.5, generator=gen)
    # renormalising over a nucleus can only raise a kept token's probability
    p = _prompts(tok)[0]
    ids, attn = pad_batch([p + s.token_ids], tok.pad_token_id)
    with torch.no_grad():
        full, _ = token_logprobs(model, ids, attn)
    for j, blp in enumerate(s.logprobs):
        assert blp >= full[0, len(p) + j].item() - 1e-6 and blp <= 0.0


def test_stop_string_ends_the_turn(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok)
    stop_id = tok.convert_tokens_to_ids("</code>")
    # force the stop: a logits bias through a wrapper model that always prefers </code> after 3 tokens
    class Forced(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.calls = inner, 0

        def forward(self, **kw):
            out = self.inner(**kw)
            self.calls += 1
            if self.calls >= 3:
                out.logits[..., stop_id] = 1e4
            return out

    engine.model = Forced(model)
    engine._cache_arg = TorchEngine(model, tok)._cache_arg
    (s,) = engine.generate(_prompts(tok)[:1], max_new_tokens=20, stop_strings=("</code>", "</answer>"))
    assert s.finish == "stop" and s.token_ids[-1] == stop_id and len(s.token_ids) == 3
    assert math.isclose(s.logprobs[-1], 0.0, abs_tol=1e-6)

"""Engine-consistency probe: does the rollout engine sample from the distribution the learner trains?

Fixed prefixes are continued by the engine (KV cache, left padding, incremental positions) and
re-scored by the learner's full forward pass (right padding, `train.batch.token_logprobs`). An
async or remote engine that silently drifts (precision, kernels, a missed weight sync) shows up
here before it shows up as a mysterious KL spike (a learner/rollout
log-probability mismatch).

- `probe/token_agreement`   greedy continuation: share of positions where the learner's argmax is
                            the engine's token (top-1 agreement).
- `probe/logprob_absdiff_{mean,max}`  sampled continuation at temperature T (top-p 1, top-k 0):
                            |engine behavior log-prob − learner log-prob| over generated tokens.

Top-k agreement beyond k = 1 needs the engine's full distribution, which the engine interface
does not return; it is not reported.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def consistency_metrics(engine_tokens: Sequence[Sequence[int]], learner_argmax: Sequence[Sequence[int]],
                        engine_logprobs: Sequence[Sequence[float]], learner_logprobs: Sequence[Sequence[float]]) -> dict[str, float]:
    """Agreement and log-prob differences from aligned per-prefix sequences."""
    same = np.concatenate([np.asarray(a) == np.asarray(b) for a, b in zip(engine_tokens, learner_argmax)] or [np.zeros(0)])
    diff = np.concatenate([np.abs(np.asarray(a, float) - np.asarray(b, float))
                           for a, b in zip(engine_logprobs, learner_logprobs)] or [np.zeros(0)])
    out = {"probe/greedy_tokens": float(same.size), "probe/sampled_tokens": float(diff.size)}
    if same.size:
        out["probe/token_agreement"] = float(same.mean())
    if diff.size:
        out["probe/logprob_absdiff_mean"] = float(diff.mean())
        out["probe/logprob_absdiff_max"] = float(diff.max())
    return out


@torch.no_grad()
def _learner_scores(model, prefixes, continuations, pad_id: int, temperature: float):
    """Per prefix: the learner's argmax and log-prob at each continuation position."""
    seqs = [list(p) + list(c) for p, c in zip(prefixes, continuations)]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    dev = next(model.parameters()).device  # the learner's device (model.device); scores come back to CPU
    logits = model(input_ids=ids.to(dev), attention_mask=attn.to(dev)).logits.float().cpu()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp = torch.log_softmax(logits, -1)
    argmax, lps = [], []
    for i, (p, c) in enumerate(zip(prefixes, continuations)):
        pos = torch.arange(len(p) - 1, len(p) - 1 + len(c))  # logits at t-1 predict token t
        argmax.append(logp[i, pos].argmax(-1).tolist())
        lps.append(logp[i, pos, torch.tensor(c, dtype=torch.long)].tolist() if c else [])
    return argmax, lps


def run_probe(engine, model, prefixes: Sequence[Sequence[int]], *, max_new_tokens: int = 16,
              temperature: float = 1.0, seed: int = 0) -> dict[str, float]:
    """Greedy and sampled continuations of `prefixes` through `engine`, re-scored by `model`."""
    pad_id = engine.pad_id
    # every draw from generators of its own: the probe leaves the run's random streams as they were
    greedy = engine.generate(prefixes, max_new_tokens=max_new_tokens, temperature=0.0,
                             generator=torch.Generator().manual_seed(seed))
    g_tokens = [s.token_ids for s in greedy]
    g_argmax, _ = _learner_scores(model, prefixes, g_tokens, pad_id, 1.0)
    gen = torch.Generator().manual_seed(seed)
    sampled = engine.generate(prefixes, max_new_tokens=max_new_tokens, temperature=temperature, generator=gen)
    s_tokens = [s.token_ids for s in sampled]
    _, s_lp = _learner_scores(model, prefixes, s_tokens, pad_id, temperature)
    return consistency_metrics(g_tokens, g_argmax, [s.logprobs for s in sampled], s_lp)

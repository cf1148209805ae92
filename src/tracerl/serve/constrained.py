"""Constrained decoding for `tool_choice` and `response_format`, and `top_logprobs` by rescoring.

`constrained_generate` samples like the engine's reference loop (one uniform per row and token from
the caller's generator, inverse-CDF draw of the processed distribution, `rollout/sampling.py`) with
one difference: before each draw, every token that would take the row's text out of its `Pattern`
(serve/constraints.py), or leave too few tokens of the budget to close it, gets logit -inf. The
log-prob recorded is the sampled token's under that masked, renormalised distribution: the
distribution the token was actually drawn from, so the learner's importance ratio against it is
correct (a token the pattern forces has log-prob 0, like a greedy one). A stop token is allowed only
where the pattern is complete; the row ends as soon as the pattern cannot go on (a closed tool call
or JSON object). When no token fits, the shortest text that completes the pattern is appended
(log-prob 0), so a constrained completion always parses unless `max_tokens` cannot hold even that.
Stop strings end a row only under an open-ended pattern (`tool_choice: "none"`).

The same loop samples the rows of a call with `logit_bias` or presence / frequency penalties
(serve/penalties.py): `adjust` changes each step's logits before the pattern's mask, and a row
whose pattern is None is unconstrained (it stops as the engine's loop does: a stop token or stop
string, or the budget). With no pattern and no adjustment it samples exactly what
`engine.generate_reference` samples (tests/serve/test_logit_adjust.py).

Vocabularies over `MAX_CANDIDATES` tokens are masked to the `MAX_CANDIDATES` most likely tokens first
(the distribution sampled from is then that restriction; documented in docs/gateway.md).
It needs the engine's torch module (`engine.model`), as the built-in engine has.
"""

from __future__ import annotations

import torch

from tracerl.algorithms.logprobs import process_logits
from tracerl.models.precision import forward_context, last_logits
from tracerl.rollout.sampling import Sample, draw_uniforms, sample_next

MAX_CANDIDATES = 4096
_TEXTS: dict[int, list[str]] = {}


def token_texts(tokenizer) -> list[str]:
    key = id(tokenizer)
    if key not in _TEXTS:
        _TEXTS[key] = [tokenizer.decode([i]) for i in range(len(tokenizer))]
    return _TEXTS[key]


class _Row:
    def __init__(self, pattern, budget):
        self.pattern, self.state, self.budget = pattern, pattern.start() if pattern is not None else None, budget
        self.ids, self.lps, self.ents, self.tops, self.finish = [], [], [], [], ""


def _closure_tokens(tokenizer, text: str, cache: dict) -> int:
    if text not in cache:
        cache[text] = len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0
    return cache[text]


@torch.no_grad()
def constrained_generate(engine, prompts, patterns, *, budgets, temperature, top_p, top_k, stop_strings=(),
                         stop_token_ids=(), generator=None, top_logprobs: int = 0,
                         adjust=None) -> list[tuple[Sample, list]]:
    """One `(Sample, top log-probs per token)` per prompt; row i spells `patterns[i]` (None: any text).
    `adjust` (a `LogitAdjust`) changes every step's logits before the mask and the draw."""
    model, tok = engine.model, engine.tokenizer
    texts, cache = token_texts(tok), {}
    stop_ids = set(int(t) for t in stop_token_ids)
    stops = engine.stop_rule(stop_strings, list(stop_ids))
    specials = set(getattr(tok, "all_special_ids", []) or []) - stop_ids
    B = len(prompts)
    rows = [_Row(p, b) for p, b in zip(patterns, budgets)]
    literals = [p.literal_text() if p is not None else "" for p in patterns]
    uniforms = draw_uniforms(B, max(budgets), generator)
    L = max(len(p) for p in prompts)
    pad = engine.pad_id
    ids = torch.full((B, L), pad, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, L - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, L - len(p):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    model.eval()
    with forward_context(model):
        out = model(input_ids=ids.to(engine.device), attention_mask=mask.to(engine.device),
                    position_ids=positions.to(engine.device), use_cache=True,
                    logits_to_keep=last_logits(model, L))
    past, logits = engine._cache_of(out), out.logits[:, -1, :].float().cpu()
    next_pos = positions[:, -1:] + 1
    V = logits.shape[-1]
    for step in range(max(budgets)):
        if adjust is not None:
            logits = adjust.apply(logits, [r.ids for r in rows])
        allowed = torch.zeros((B, V), dtype=torch.bool)
        for i, r in enumerate(rows):
            if r.finish:
                allowed[i, 0] = True
                continue
            if r.pattern is None:
                allowed[i] = True
                continue
            room = r.budget - len(r.ids) - 1
            order = range(V) if V <= MAX_CANDIDATES else torch.topk(logits[i], MAX_CANDIDATES).indices.tolist()
            complete = r.pattern.complete(r.state)
            for t in order:
                if t in stop_ids:
                    allowed[i, t] = complete
                    continue
                if t >= len(texts) or not texts[t] or (t in specials and not r.pattern.open_ended
                                                         and texts[t] not in literals[i]):
                    continue
                s2 = r.pattern.feed(r.state, texts[t])
                if s2 is not None and _closure_tokens(tok, r.pattern.closure(s2), cache) <= room:
                    allowed[i, t] = True
        masked = logits.masked_fill(~allowed, float("-inf"))
        tokens, lps, ents = sample_next(masked, uniforms[:, step], temperature=temperature, top_p=top_p, top_k=top_k)
        feed = torch.full((B,), pad, dtype=torch.long)
        for i, r in enumerate(rows):
            if r.finish:
                continue
            if not bool(allowed[i].any()):  # nothing fits: close the pattern with its shortest completion
                forced = tok(r.pattern.closure(r.state), add_special_tokens=False)["input_ids"]
                forced = forced[:r.budget - len(r.ids)]
                r.ids += forced
                r.lps += [0.0] * len(forced)
                r.ents += [0.0] * len(forced)
                r.tops += [[(t, 0.0)] for t in forced]
                r.state = r.pattern.feed(r.state, tok.decode(forced)) or r.state
                r.finish = "stop" if r.pattern.complete(r.state) else "length"
                continue
            t = int(tokens[i])
            r.ids.append(t)
            r.lps.append(float(lps[i]))
            r.ents.append(float(ents[i]))
            if top_logprobs:
                r.tops.append(_top(masked[i:i + 1], temperature, top_p, top_k, top_logprobs)[0])
            feed[i] = t
            if t in stop_ids or (r.pattern is None and stops(r.ids, t)):
                r.finish = "stop"
                continue
            if r.pattern is None:
                r.finish = "length" if len(r.ids) >= r.budget else ""
                continue
            r.state = r.pattern.feed(r.state, texts[t])
            if r.pattern.must_end(r.state) or (r.pattern.open_ended and stops(r.ids, t)):
                r.finish = "stop"
            elif len(r.ids) >= r.budget:
                r.finish = "length"
        if all(r.finish for r in rows):
            break
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype)], dim=1)
        with forward_context(model):
            out = model(input_ids=feed[:, None].to(engine.device), attention_mask=mask.to(engine.device),
                        position_ids=next_pos.to(engine.device), use_cache=True, **{engine._cache_arg: past})
        past, logits = engine._cache_of(out), out.logits[:, -1, :].float().cpu()
        next_pos = next_pos + 1
    return [(Sample(r.ids, r.lps, r.finish or "length", r.ents), r.tops) for r in rows]


def _top(logits_BV: torch.Tensor, temperature: float, top_p: float, top_k: int, k: int) -> list[list[tuple[int, float]]]:
    """The k most likely tokens of each row's sampling distribution, with their log-probs."""
    if temperature == 0.0:  # greedy: a point mass on the argmax
        return [[(int(t), 0.0)] for t in logits_BV.argmax(-1)]
    logp = torch.log_softmax(process_logits(logits_BV, temperature=temperature, top_p=top_p, top_k=top_k), -1)
    vals, idx = torch.topk(logp, min(k, logp.shape[-1]), dim=-1)
    return [[(int(t), float(v)) for t, v in zip(ti, vi) if v > float("-inf")] for ti, vi in zip(idx, vals)]


@torch.no_grad()
def rescore_top(engine, prompt: list[int], completion: list[int], sampling: dict, k: int) -> list[list[tuple[int, float]]]:
    """`top_logprobs` of an unconstrained sample: one forward over prompt + completion, the k most likely
    tokens at each completion position under the distribution it was sampled from (temperature, top-p, top-k)."""
    if not completion:
        return []
    model = engine.model
    ids = torch.tensor([prompt + completion[:-1]], dtype=torch.long, device=engine.device)
    model.eval()
    with forward_context(model):
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:, :].float().cpu()
    return _top(logits, sampling["temperature"], sampling["top_p"], sampling["top_k"], k)

"""Token log-probabilities and entropies for large vocabularies without materialising (B, T, V) at once.

For a vocabulary of 151,936 (Qwen), the float32 logits of 8k tokens alone take 5 GB, and a naive
`log_softmax` + entropy makes several more copies. `token_logprobs_and_entropy` walks the flattened
tokens in chunks of `chunk_size`: each chunk's logits are formed (from `hidden @ lm_head.T` when the
LM head is given, so the full logits never exist), reduced to a log-probability and an entropy per
token, and dropped. With autograd on, each chunk runs under activation checkpointing, so backward
recomputes one chunk at a time instead of keeping every chunk's (chunk, V) intermediates.

    z = logits / temperature,   log p(y) = z_y − logsumexp(z),   H = logsumexp(z) − Σ softmax(z)·z

Computation is in float32 (float64 inputs stay float64). Targets < 0 (e.g. −100 padding) give log-prob
0 and are otherwise ignored. Source: the chunked/fused cross-entropy idea of Liger-Kernel (Hsu et al.
2024) and Wijmans et al. 2024 ("Cut Your Losses in Large-Vocabulary Language Models"); this is a
pure-torch version, not their fused kernels.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

# A chunk holds at most this many logits (2**23 float32 = 32 MB a copy; its softmax, products and the backward's
# recomputation make several): `chunk_size` rows at a small vocabulary, fewer at a large one (170 at
# SmolLM2's 49,152; 55 at Qwen's 151,936), so the peak no longer grows with the vocabulary.
CHUNK_ELEMENTS = 2**23


def chunk_rows(chunk_size: int, vocab: int) -> int:
    """Positions per chunk: `chunk_size`, capped so a chunk's logits stay within `CHUNK_ELEMENTS`."""
    return max(1, min(chunk_size, CHUNK_ELEMENTS // max(vocab, 1)))


def _head(lm_head) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(lm_head, torch.Tensor):
        return lm_head, None
    return lm_head.weight, getattr(lm_head, "bias", None)


def process_logits(logits_BV: torch.Tensor, *, temperature: float, top_p: float = 1.0, top_k: int = 0,
                   keep_B: torch.Tensor | None = None) -> torch.Tensor:
    """Logits of the sampling distribution: tempered, then top-k and top-p masked to -inf.

    The rollout engine samples from these logits and the learner scores tokens under the same ones,
    so an on-policy ratio is exactly 1. `keep_B` (token ids, one per row) is never masked: the learner
    passes the sampled tokens, which the engine's own nucleus held even where a float rounding
    difference would put them just outside the learner's.
    """
    logits = logits_BV.float() if logits_BV.dtype != torch.float64 else logits_BV
    if temperature != 1.0:
        logits = logits / temperature
    if not (top_k and top_k < logits.shape[-1]) and top_p >= 1.0:
        return logits
    with torch.no_grad():  # which tokens survive is a discrete choice; the gradient flows through the kept logits
        drop = torch.zeros_like(logits, dtype=torch.bool)
        if top_k and top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
            drop |= logits < kth
        if top_p < 1.0:
            masked = logits.masked_fill(drop, float("-inf"))
            sorted_logits, order = torch.sort(masked, descending=True, dim=-1)
            probs = torch.softmax(sorted_logits, dim=-1)
            # drop a token when the mass before it already reaches top_p (the first token always stays)
            drop_sorted = (probs.cumsum(-1) - probs) >= top_p
            drop |= torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        if keep_B is not None:
            drop.scatter_(-1, keep_B.clamp_min(0)[:, None], False)
    return logits.masked_fill(drop, float("-inf"))


def _chunk_stats(z: torch.Tensor, targets: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0,
                 full: bool = False):
    """(logp, entropy[, full-softmax logp]) of `targets` under the processed distribution of logits `z`."""
    zt = process_logits(z, temperature=temperature)
    zp = process_logits(zt, temperature=1.0, top_p=top_p, top_k=top_k, keep_B=targets)  # zt itself when unprocessed
    safe = targets.clamp_min(0)
    lse = torch.logsumexp(zp, dim=-1)
    logp = zp.gather(-1, safe[:, None])[:, 0] - lse
    logp = torch.where(targets >= 0, logp, torch.zeros_like(logp))
    # masked logits are -inf with probability 0; zero them first so 0 * -inf never reaches autograd (only top-k/p
    # masks any: unprocessed logits are finite, and skipping the mask saves two (chunk, V) temporaries)
    finite = zp if zp is zt else torch.where(torch.isfinite(zp), zp, torch.zeros_like(zp))
    entropy = lse - (torch.softmax(zp, dim=-1) * finite).sum(dim=-1)
    if not full:
        return logp, entropy
    if zp is zt:
        return logp, entropy, logp
    logp_full = zt.gather(-1, safe[:, None])[:, 0] - torch.logsumexp(zt, dim=-1)
    return logp, entropy, torch.where(targets >= 0, logp_full, torch.zeros_like(logp_full))


def _from_hidden(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                 temperature: float, top_p: float = 1.0, top_k: int = 0, full: bool = False):
    z = h @ weight.t()
    if bias is not None:
        z = z + bias
    return _chunk_stats(z, targets, temperature, top_p, top_k, full)


def token_logprobs_and_entropy(
    logits_or_hidden: torch.Tensor,
    targets_BT: torch.Tensor,
    *,
    lm_head: torch.nn.Module | torch.Tensor | None = None,
    chunk_size: int = 1024,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs_BT, entropy_BT). Pass logits (B, T, V), or hidden states (B, T, H) with `lm_head`
    (an `nn.Linear`-like module or a (V, H) weight)."""
    B, T = targets_BT.shape
    if logits_or_hidden.shape[:2] != (B, T):
        raise ValueError(f"inputs {tuple(logits_or_hidden.shape)} do not match targets {tuple(targets_BT.shape)}")
    x = logits_or_hidden.reshape(B * T, logits_or_hidden.shape[-1])
    logp, ent, _ = chunked_token_scores(x, targets_BT.reshape(B * T), lm_head=lm_head, chunk_size=chunk_size,
                                        temperature=temperature)
    return logp.view(B, T), ent.view(B, T)


def chunked_token_scores(
    logits_or_hidden_N: torch.Tensor, targets_N: torch.Tensor, *, lm_head=None, chunk_size: int = 1024,
    temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logp_N, entropy_N, full_logp_N) over N flattened positions, `chunk_size` at a time.

    `logp` and `entropy` are under the processed sampling distribution (temperature, top-k, top-p,
    the target always kept: `process_logits`); `full_logp` under the tempered full softmax (the
    distribution a KL to another model compares). Without top-k/top-p the two log-probs are one tensor.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    x, targets = logits_or_hidden_N, targets_N.long()
    grad = torch.is_grad_enabled()
    weight = bias = None
    if lm_head is not None:
        weight, bias = _head(lm_head)
        grad = grad and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    else:
        grad = grad and x.requires_grad
    outs = []
    rows = chunk_rows(chunk_size, (weight.shape[0] if weight is not None else x.shape[-1]))
    processed = top_p < 1.0 or top_k > 0
    if grad and lm_head is not None and not processed and rows < chunk_size:  # a large vocabulary: one weight-gradient buffer
        from tracerl.algorithms.fused_head import HeadScores

        logp, ent = HeadScores.apply(x, weight, bias, targets, temperature, rows)
        return logp, ent, logp
    chunk_size = rows
    for s in range(0, x.shape[0], chunk_size):
        xc, tc = x[s:s + chunk_size], targets[s:s + chunk_size]
        if lm_head is not None:
            fn, args = _from_hidden, (xc, weight, bias, tc, temperature, top_p, top_k, True)
        else:
            fn, args = _chunk_stats, (xc, tc, temperature, top_p, top_k, True)
        outs.append(checkpoint(fn, *args, use_reentrant=False) if grad else fn(*args))
    if not outs:
        empty = x.new_zeros(0, dtype=torch.float32)
        return empty, empty, empty
    logp, ent = torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])
    return logp, ent, (torch.cat([o[2] for o in outs]) if processed else logp)


def _support_chunk(z: torch.Tensor, support, temperature: float):
    """(logp_NK, ids_NK) of a chunk of logits: at the top-`support` tokens (an int) or at given ids ([N, K])."""
    zt = process_logits(z, temperature=temperature)
    lse = torch.logsumexp(zt, dim=-1, keepdim=True)
    if isinstance(support, int):
        with torch.no_grad():
            ids = torch.topk(zt, min(support, zt.shape[-1]), dim=-1).indices
    else:
        ids = support.long()
    return zt.gather(-1, ids) - lse, ids


def _support_from_hidden(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, support, temperature: float):
    z = h @ weight.t()
    return _support_chunk(z if bias is None else z + bias, support, temperature)


def chunked_support_logprobs(
    logits_or_hidden_N: torch.Tensor, support: int | torch.Tensor, *, lm_head=None, chunk_size: int = 1024,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp_NK, ids_NK): log-probs under the tempered full softmax of K tokens per position, `chunk_size`
    positions at a time — the `support` most likely ones (an int K; chosen without gradient, the
    teacher's side of a distribution-matching distillation loss) or the given ids (`[N, K]`, the
    student's side, with gradient when autograd is on)."""
    x = logits_or_hidden_N
    weight = bias = None
    if lm_head is not None:
        weight, bias = _head(lm_head)
    grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad))
    outs = []
    chunk_size = chunk_rows(chunk_size, (weight.shape[0] if weight is not None else x.shape[-1]))
    for s in range(0, x.shape[0], chunk_size):
        sup = support if isinstance(support, int) else support[s:s + chunk_size]
        fn, args = ((_support_from_hidden, (x[s:s + chunk_size], weight, bias, sup, temperature)) if lm_head is not None
                    else (_support_chunk, (x[s:s + chunk_size], sup, temperature)))
        outs.append(checkpoint(fn, *args, use_reentrant=False) if grad else fn(*args))
    if not outs:
        k = support if isinstance(support, int) else support.shape[-1]
        return x.new_zeros(0, k, dtype=torch.float32), torch.zeros(0, k, dtype=torch.long, device=x.device)
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])


def naive_token_logprobs_and_entropy(
    logits_or_hidden: torch.Tensor, targets_BT: torch.Tensor, *, lm_head=None, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain full-vocabulary computation (the reference the chunked path is tested and benchmarked against)."""
    z = logits_or_hidden
    if lm_head is not None:
        weight, bias = _head(lm_head)
        z = z @ weight.t() + (bias if bias is not None else 0)
    z = (z if z.dtype == torch.float64 else z.float()) / temperature
    logp_all = torch.log_softmax(z, dim=-1)
    safe = targets_BT.long().clamp_min(0)
    logp = logp_all.gather(-1, safe[..., None])[..., 0]
    logp = torch.where(targets_BT >= 0, logp, torch.zeros_like(logp))
    entropy = -(logp_all.exp() * logp_all).sum(dim=-1)
    return logp, entropy

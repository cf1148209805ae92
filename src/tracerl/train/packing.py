"""Sequence packing and token-budget micro-batches for the learner (`learner.packing`,
`learner.max_tokens_per_micro_batch`).

Packing: a minibatch's rows are laid end to end without padding into bins no longer than its longest row
(first-fit decreasing), each row with position ids 0..len−1 of its own and attention confined to itself by a
4-D block-diagonal causal mask (additive: 0 inside a row's causal block, the dtype's minimum elsewhere — the
form both the eager and the SDPA attention of Hugging Face decoders take as given). Each position's hidden
state is then the padded forward's up to float rounding, so log-probs, entropies and gradients are too
(`tests/train/test_packing.py`); the forward and backward run Σ lengths tokens instead of rows × longest.
Bins as long as the longest row keep each bin's attention no larger than a padded row's (one long packed
row would make it quadratic in the minibatch's tokens). veRL `remove_padding` and OpenRLHF `packing_samples`
do the same with flash-attention's cu_seqlens; on CPU there is no varlen kernel, so the mask is dense.

Micro-batches: a minibatch's rows split, in order, into groups whose forward tokens (Σ lengths when packed,
rows × longest when padded) stay within the budget (a longer row runs alone); the optimizer steps once on
the sum of their gradients, which is the whole minibatch's gradient (`train/minibatch.py`).
"""

from __future__ import annotations

import torch

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.logprobs import chunked_support_logprobs, chunked_token_scores
from tracerl.algorithms.spec import PolicyOutput
from tracerl.models.precision import forward_context


def pack_bins(lengths: list[int], capacity: int) -> list[list[int]]:
    """Row indices per bin: first-fit decreasing into bins of `capacity` tokens (a longer row gets its own)."""
    bins: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for b, room in enumerate(free):
            if lengths[i] <= room:
                bins[b].append(i)
                free[b] -= lengths[i]
                break
        else:
            bins.append([i])
            free.append(capacity - lengths[i])
    return bins


def micro_batches(lengths: list[int], budget: int | None, *, packed: bool) -> list[list[int]]:
    """Positions (into `lengths`) of each micro-batch, in order, each costing at most `budget` forward tokens
    (a row over budget alone); None: one micro-batch."""
    if budget is None:
        return [list(range(len(lengths)))]
    out: list[list[int]] = []
    cur: list[int] = []
    for i, n in enumerate(lengths):
        trial = cur + [i]
        cost = sum(lengths[j] for j in trial) if packed else len(trial) * max(lengths[j] for j in trial)
        if cur and cost > budget:
            out.append(cur)
            trial = [i]
        cur = trial
    return out + ([cur] if cur else [])


def packed_inputs(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids_PL, position_ids_PL, block mask [P, 1, L, L] as bool (True: may attend), where_BT) for the
    batch's rows packed into P bins of width L; `where_BT` holds each (row, column)'s flat index into the
    packed [P·L] layout (−1 beyond the row's end)."""
    lengths = batch.length_B.tolist()
    L = max(lengths)
    bins = pack_bins(lengths, L)
    P, dev = len(bins), batch.ids_BT.device
    ids = torch.zeros((P, L), dtype=torch.long, device=dev)
    pos = torch.zeros((P, L), dtype=torch.long, device=dev)
    seg = torch.full((P, L), -1, dtype=torch.long, device=dev)  # which row each packed column holds
    where = torch.full(batch.ids_BT.shape, -1, dtype=torch.long, device=dev)
    for p, rows in enumerate(bins):
        at = 0
        for r in rows:
            n = lengths[r]
            ids[p, at:at + n] = batch.ids_BT[r, :n]
            pos[p, at:at + n] = torch.arange(n, device=dev)
            seg[p, at:at + n] = r
            where[r, :n] = p * L + at + torch.arange(n, device=dev)
            at += n
    causal = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
    pad = torch.eye(L, dtype=torch.bool, device=dev)[None] & (seg < 0)[:, :, None]  # a pad column sees itself
    return ids, pos, ((same & causal) | pad)[:, None], where


def packed_scores(model, parts, batch: Batch, *, temperature: float, top_p: float = 1.0, top_k: int = 0,
                  chunk_size: int = 1024, support: int | torch.Tensor | None = None) -> PolicyOutput:
    """`roles.score_tokens` on the packed layout: log-probs (processed and full), entropies and, with `support`,
    support log-probs of the batch's ACTION tokens, `[B, T, ...]`, 0 elsewhere; gradients flow when autograd is
    on. `parts` is `(decoder, output layer)` of a plain decoder, else None (scored from the model's logits)."""
    ids, pos, allowed, where = packed_inputs(batch)
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=ids.device).masked_fill(~allowed, torch.finfo(dtype).min)
    sel = batch.action_BT[:, 1:] > 0  # position t − 1 predicts the ACTION token at t
    targets = batch.ids_BT[:, 1:][sel]
    kw = dict(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=False)
    with forward_context(model):
        if parts is not None:
            out, head = parts[0](**kw).last_hidden_state, parts[1]
        else:
            out, head = model(**kw).logits, None
        x = out.reshape(-1, out.shape[-1])[where[:, :-1][sel]]
        logp, ent, full = chunked_token_scores(x, targets, lm_head=head, chunk_size=chunk_size,
                                               temperature=temperature, top_p=top_p, top_k=top_k)
        if support is not None:
            sup = support if isinstance(support, int) else support[:, 1:][sel]
            sup_lp, sup_ids = chunked_support_logprobs(x, sup, lm_head=head, chunk_size=chunk_size,
                                                       temperature=temperature)

    def place(v: torch.Tensor) -> torch.Tensor:
        shape = (*sel.shape, *v.shape[1:])
        m = sel.view(*sel.shape, *[1] * (v.dim() - 1)).expand(shape)
        placed = torch.zeros(shape, dtype=v.dtype, device=v.device).masked_scatter(m, v)
        return torch.cat([torch.zeros_like(placed[:, :1]), placed], dim=1)

    lp = place(logp)
    res = PolicyOutput(logprobs_BT=lp, full_logprobs_BT=lp if full is logp else place(full), entropy_BT=place(ent))
    if support is not None:
        res.support_logprobs_BTK, res.support_ids_BTK = place(sup_lp), place(sup_ids)
    return res

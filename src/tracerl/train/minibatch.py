"""The policy's minibatch loop, the one of every learner: which rows form each minibatch
(`minibatch_rows`), how a minibatch's loss keeps the full batch's normaliser (`minibatch_scale`),
and the optimizer steps over them (`policy_steps`), run in the trainer's process (one rank) or on
every rank of a sharded learner (`train/fsdp_group.py`), each rank taking its share of the rows.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.losses.corrections import effective_sample_size
from tracerl.algorithms.spec import Algorithm, StepContext


def minibatch_scale(aggregation: str, mask_BT: torch.Tensor, full_tokens: float, full_rows: float, n: int) -> float:
    """Factor turning a minibatch's aggregated loss into its share of the full batch's objective."""
    if aggregation == "token":
        return float(mask_BT.sum()) / (full_tokens / n)
    return mask_BT.shape[0] / (full_rows / n)


def minibatch_rows(batch: Batch, keep: torch.Tensor, n: int, *, whole_groups: bool = False) -> list[torch.Tensor]:
    """The row indices of each of up to `n` non-empty minibatches over rows `keep`, in a random order
    (torch's global generator).

    whole_groups: a group's rows stay in one minibatch (veRL's layout): groups in random order, cut at
    the group boundary nearest each equal share of rows. A group's baseline makes its advantages sum
    to zero, so the tokens its rows share (the tool call every row wrote the same way) get no net
    gradient; split across two optimizer steps, each half pushes them by a zero-mean random amount.
    false (the default): rows shuffled independently and cut into equal shares (a group may straddle
    a cut).
    """
    N = keep.numel()
    if not whole_groups:
        order = keep[torch.randperm(N)]
        cuts = [k * N // n for k in range(n + 1)]
    else:
        groups = batch.group_B[keep]
        ids = groups.unique()
        members = [keep[groups == g] for g in ids[torch.randperm(ids.numel())]]
        order = torch.cat(members) if members else keep
        ends = [0] + torch.cumsum(torch.tensor([m.numel() for m in members]), 0).tolist()
        cuts = [0] + [min(ends, key=lambda b: abs(b - k * N / n)) for k in range(1, n)] + [N]
    return [order[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def _minibatches(batch: Batch, slices: list[torch.Tensor]):
    """(row indices, sub-batch, its width) for each slice."""
    for idx in slices:
        mb = batch.rows(idx)
        yield idx, mb, mb.ids_BT.shape[1]


def policy_steps(algo: Algorithm, policy, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor],
                 adv_BT: torch.Tensor, slices: list[torch.Tensor], *, minibatches: int, ctx: StepContext,
                 rank: int = 0, world: int = 1, group=None, micro_tokens: int | None = None,
                 packed: bool = False) -> dict[str, float]:
    """The policy's optimizer steps of `rl_update`, one per slice of rows (`minibatch_rows`): THE minibatch loop,
    run as is by the single-process learner (`PolicyRole`, world 1: no collectives) and by every rank of the
    sharded one (`ShardedPolicy`, train/fsdp.py), all ranks called with the same arguments.

    `policy` answers `score(mb, support=)`, `step(loss) -> grad norm` and `module` (put in train mode for the
    steps). Returns the stats `rl_update` reports: the per-step means of the loss, its terms and the gradient
    norm, the effective sample size of the importance weights π_θ/π_behavior as each step saw them, `updates`
    and `trained_rows`.

    Sharded (world > 1), when the loss is `Algorithm.row_separable`: rank r takes rows `idx[r::world]` of each slice and
    keeps the single-process normaliser (`minibatch_scale` of its own rows against the batch-wide counts), so
    the ranks' losses add up to the single-process loss; FSDP's reduce-scatter averages the gradients, so each
    rank back-propagates `world` times its share. A rank left without rows runs one row at zero weight, so the
    collectives line up. The stats are all-reduced: `loss` the sum over ranks, the other loss stats averaged
    weighted by each rank's loss tokens, `grad_norm` the global norm. When the loss is not row-separable, every
    rank runs the WHOLE slice (the same rows, the loss not multiplied: FSDP's average of identical gradients is
    the gradient): correct, with sharded weights and optimizer state, but not data-parallel.
    """
    mask = batch.mask_BT
    eligible = (batch.weight_B > 0) & (mask.sum(dim=1) > 0)
    full_tokens, full_rows = float(mask.sum()), float(eligible.sum())
    split = world > 1 and algo.row_separable()
    ratios, acc, steps = [], {}, 0
    policy.module.train()
    for idx in slices:
        mine, share = idx, True
        if split:
            mine = idx[rank::world]
            share = mine.numel() > 0
            mine = mine if share else idx[:1]
        if micro_tokens is not None or packed:  # token-budget micro-batches, gradients accumulated (one rank)
            s = _accumulated_step(algo, policy, batch, rewards_B, scores, adv_BT, mine, ctx, ratios,
                                  scale=lambda m: minibatch_scale(algo.aggregation, m, full_tokens, full_rows,
                                                                  minibatches),
                                  micro_tokens=micro_tokens, packed=packed, world=world if split else 1,
                                  share=share, group=group)
            for n, v in s.items():
                acc[n] = acc.get(n, 0.0) + v
            steps += 1
            continue
        mb = batch.rows(mine)
        T = mb.ids_BT.shape[1]
        mb_scores = {n: v[mine, :T] for n, v in scores.items()}
        out = policy.score(mb, support=algo.support_ids(mb_scores))  # e.g. MOPD's teacher top-K tokens
        loss, s = algo.loss(mb, out, mb_scores, adv_BT[mine, :T], rewards_B[mine], ctx)
        loss = loss * minibatch_scale(algo.aggregation, mb.mask_BT, full_tokens, full_rows, minibatches)
        if not share:
            loss = loss * 0.0
        grad_norm = policy.step(loss * world if split else loss)  # FSDP averages the ranks' gradients
        sel = mb.mask_BT > 0
        if share:
            ratios.append(torch.exp(out.logprobs_BT.detach() - mb.behavior_BT)[sel])
        s = {n: float(v) for n, v in s.items() if torch.as_tensor(v).numel() == 1}
        s |= {"loss": float(loss.detach()), "grad_norm": grad_norm}
        if split:
            s = _all_reduce_stats(s, float(sel.sum()) if share else 0.0, group)
        for n, v in s.items():
            acc[n] = acc.get(n, 0.0) + v
        steps += 1
    policy.module.eval()
    out_stats = {n: v / steps for n, v in acc.items()}
    w = torch.cat(ratios) if ratios else torch.zeros(0)
    if split:
        gathered: list = [None] * world
        dist.all_gather_object(gathered, w, group=group)
        w = torch.cat(gathered)
    out_stats |= {k: float(v) for k, v in effective_sample_size(w, torch.ones_like(w)).items()}
    out_stats |= {"updates": float(steps), "trained_rows": float(sum(int(i.numel()) for i in slices))}
    return out_stats


def _accumulated_step(algo: Algorithm, policy, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor],
                      adv_BT: torch.Tensor, rows: torch.Tensor, ctx: StepContext, ratios: list, *, scale,
                      micro_tokens: int | None, packed: bool, world: int = 1, share: bool = True,
                      group=None) -> dict[str, float]:
    """One optimizer step on minibatch `rows`, run as micro-batches of at most `micro_tokens` forward tokens
    (`train/packing.py` `micro_batches`), each one's loss scaled to its share of the full batch's objective
    (`scale`, a `minibatch_scale` of its mask) and back-propagated before the next runs: for a row-separable
    loss the summed gradient is the whole minibatch's. Stats: `loss` the sum, the others averaged weighted by
    each micro-batch's loss tokens (`tokens` summed).

    On the ranks of a sharded learner (`world` > 1: `rows` is this rank's share) every rank must run as many
    forwards and backwards as the others (each gathers and reduce-scatters the shards): the ranks agree on the
    largest micro-batch count and a rank with fewer pads with one row at zero weight, as does a rank without
    rows (`share` False); each loss is back-propagated `world` times (FSDP averages the ranks' gradients) and
    the stats are all-reduced as `policy_steps` does."""
    from tracerl.train.packing import micro_batches

    parts = [rows[torch.tensor(p, dtype=torch.long)]
             for p in micro_batches(batch.length_B[rows].tolist(), micro_tokens, packed=packed)]
    weights = [1.0 if share else 0.0] * len(parts)
    if world > 1:
        most = torch.tensor([len(parts)])
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=group)
        weights += [0.0] * (int(most) - len(parts))
        parts += [rows[:1]] * (int(most) - len(parts))
    sums: dict[str, float] = {}
    total = {"loss": 0.0, "tokens": 0.0}

    def backward() -> None:
        for part, w in zip(parts, weights):
            mb = batch.rows(part)
            T = mb.ids_BT.shape[1]
            mb_scores = {n: v[part, :T] for n, v in scores.items()}
            out = policy.score(mb, support=algo.support_ids(mb_scores))
            loss, s = algo.loss(mb, out, mb_scores, adv_BT[part, :T], rewards_B[part], ctx)
            loss = loss * scale(mb.mask_BT)
            (loss * (w * world) if world > 1 or not w else loss).backward()
            sel = mb.mask_BT > 0
            n = float(sel.sum()) * w  # padding (w 0): the stats' names, none of its numbers
            if w:
                ratios.append(torch.exp(out.logprobs_BT.detach() - mb.behavior_BT)[sel])
            for k, v in s.items():
                if torch.as_tensor(v).numel() == 1:
                    sums[k] = sums.get(k, 0.0) + float(v) * (w if k == "tokens" else n)
            total["loss"] += float(loss.detach()) * w
            total["tokens"] += n

    grad_norm = policy.step(backward)  # `optimizer_step` zeroes the gradients, then calls it
    n = max(total["tokens"], 1e-12)
    out = ({k: v if k == "tokens" else v / n for k, v in sums.items()}
           | {"loss": total["loss"], "grad_norm": grad_norm})
    return _all_reduce_stats(out, total["tokens"], group) if world > 1 else out


def _all_reduce_stats(s: dict[str, float], tokens: float, group) -> dict[str, float]:
    """One step's stats over the ranks: `loss` summed, `grad_norm` (already global) kept, the rest averaged
    weighted by each rank's loss tokens."""
    names = sorted(n for n in s if n not in ("loss", "grad_norm"))
    vec = torch.tensor([s["loss"], tokens] + [s[n] * tokens for n in names], dtype=torch.float64)
    dist.all_reduce(vec, group=group)
    out = {n: float(vec[2 + i] / max(float(vec[1]), 1e-12)) for i, n in enumerate(names)}
    return out | {"loss": float(vec[0]), "grad_norm": s["grad_norm"]}

"""One RL update: the algorithm's tensors → advantages → minibatch losses → optimizer steps.

`rl_update` only slices the `Batch`; what is computed comes from the `Algorithm`, how models are
run from the `Roles`. Rows whose advantage is zero on every token add nothing to a surrogate's
numerator, so unless the algorithm has a term that every row moves (KL, entropy, NLL) they are
left out of the forward passes; each minibatch loss is rescaled so the objective keeps the full
batch's denominator (all eligible tokens for `token`, all responses for `sequence` / `fixed`).

This is the one RL step of every mode (sync, async; one learner process or `learner.ranks > 1`):
the auxiliary roles train by `train_role` (in the driver, or on their actor: `placement.critic` /
`.prm`), and the policy's minibatch loop is `policy_steps` (`train/minibatch.py`), run by `roles.policy.train_steps` — in this process for `PolicyRole`, on every rank
of the learner group for the sharded policy (`train/fsdp_group.py`).
"""

from __future__ import annotations

import torch

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.spec import Algorithm, StepContext
from tracerl.train.minibatch import _minibatches, minibatch_rows
from tracerl.train.roles import Roles


def rl_update(algo: Algorithm, roles: Roles, batch: Batch, rewards_B: torch.Tensor, *, minibatches: int,
              ctx: StepContext, whole_groups: bool = False) -> tuple[dict[str, float], torch.Tensor]:
    """Advantages and up to `minibatches` optimizer steps on one batch (`minibatch_rows`).

    Returns the step's stats (without "updates" when no step was taken) and the advantages `adv_BT`.
    """
    needs, trained = algo.needs(), algo.trained_roles()
    mask = batch.mask_BT
    eligible = (batch.weight_B > 0) & (mask.sum(dim=1) > 0)
    late = {p for n, ph in trained.items() if ph == "before" for p in roles.aux[n].provides}
    scores = roles.scores(batch, needs - late)
    out_stats: dict[str, float] = {}
    for name in (n for n, ph in trained.items() if ph == "before"):  # e.g. PRIME's PRM, on these rollouts
        out_stats |= train_role(algo, roles, name, batch, rewards_B, scores, eligible, minibatches, ctx, whole_groups)
    if late:
        scores |= roles.scores(batch, needs & late)
    adv_BT, stats = algo.advantages(batch, rewards_B, scores)
    out_stats |= stats
    for name in (n for n, ph in trained.items() if ph == "after"):  # e.g. the critic, after its old values were used
        out_stats |= train_role(algo, roles, name, batch, rewards_B, scores, eligible, minibatches, ctx, whole_groups)
    rows = eligible & ((adv_BT != 0).any(dim=1) | algo.every_row)
    if not rows.any() or roles.warming_up(ctx.step):
        return out_stats, adv_BT
    keep = rows.nonzero().flatten()
    slices = minibatch_rows(batch, keep, minibatches, whole_groups=whole_groups)
    out_stats |= roles.policy.train_steps(algo, batch, rewards_B, scores, adv_BT, slices, minibatches=minibatches, ctx=ctx)
    return out_stats, adv_BT


def train_role(algo: Algorithm, roles: Roles, name: str, batch: Batch, rewards_B: torch.Tensor,
               scores: dict[str, torch.Tensor], eligible: torch.Tensor, minibatches: int,
               ctx: StepContext, whole_groups: bool = False) -> dict[str, float]:
    """Up to `minibatches` optimizer steps of auxiliary role `name` on the eligible rows it trains on, with the
    algorithm's `role_loss`; returns the mean of its scalar stats over the steps and, when the algorithm
    `summarises` the role, its `role_summary` of the per-row stats, all under `<name>/`.

    The rows and their minibatches are drawn here, from the trainer's random stream; the steps are the role's
    `train_steps` (`role_steps`), in this process or on the role's actor (`placement.<name>`)."""
    role = roles.aux[name]
    only = algo.role_rows(name, batch, rewards_B)  # e.g. PRIME's PRM: groups with both labels
    keep = (eligible if only is None else eligible & only).nonzero().flatten()
    slices = minibatch_rows(batch, keep, minibatches, whole_groups=whole_groups) if keep.numel() else []
    return role.train_steps(algo, name, batch, rewards_B, scores, eligible, slices, minibatches=minibatches, ctx=ctx)


def role_steps(algo: Algorithm, role, name: str, batch: Batch, rewards_B: torch.Tensor,
               scores: dict[str, torch.Tensor], eligible: torch.Tensor, slices: list[torch.Tensor], *,
               minibatches: int, ctx: StepContext) -> dict[str, float]:
    """A trained auxiliary role's summary (as it enters the step) and one optimizer step per slice, where it lives."""
    summary = _summary_before(algo, role, name, batch, rewards_B, scores, eligible, minibatches, ctx)
    if not slices:
        return summary
    acc, steps = {}, 0
    for idx, mb, T in _minibatches(batch, slices):
        loss, s = algo.role_loss(name, mb, role.forward(mb), {n: v[idx, :T] for n, v in scores.items()},
                                 rewards_B[idx], ctx)
        s = {n: float(v) for n, v in s.items() if not n.startswith("row/")} | {"grad_norm": role.trained.step(loss)}
        for n, v in s.items():
            acc[n] = acc.get(n, 0.0) + v
        steps += 1
    role.trained.scheduler.step()
    return {f"{name}/{n}": v / max(steps, 1) for n, v in acc.items()} | summary


@torch.no_grad()
def _summary_before(algo: Algorithm, role, name: str, batch: Batch, rewards_B: torch.Tensor,
                    scores: dict[str, torch.Tensor], eligible: torch.Tensor, minibatches: int,
                    ctx: StepContext) -> dict[str, float]:
    """`role_summary` of the per-row stats (`row/<x>`) of `role_loss` over every eligible row, scored by the
    role as it enters the step (one version, on rollouts it has not trained on); {} unless asked for."""
    rows_idx = eligible.nonzero().flatten()
    if not algo.summarises(name) or rows_idx.numel() == 0:
        return {}
    rows: dict[str, list[torch.Tensor]] = {}
    n = rows_idx.numel()
    chunks = [rows_idx[k * n // minibatches:(k + 1) * n // minibatches] for k in range(minibatches)]
    for idx, mb, T in _minibatches(batch, [c for c in chunks if c.numel()]):
        _, s = algo.role_loss(name, mb, role.forward(mb), {n: v[idx, :T] for n, v in scores.items()}, rewards_B[idx], ctx)
        for n in (n for n in s if n.startswith("row/")):
            rows.setdefault(n[4:], []).append(s[n].detach().flatten())
    summary = algo.role_summary(name, {n: torch.cat(v) for n, v in rows.items()})
    return {f"{name}/{n}": float(v) for n, v in summary.items()}

"""The sharded policy of the FSDP2 learner (`learner.ranks > 1`): one copy of the policy per rank,
its parameters, gradients and AdamW moments sharded over the process group by `fully_shard`.

Data parallel over the `Batch`'s rows: every rank holds the whole batch (advantages are computed
on whole groups, before the update) and each of the `minibatches` optimizer steps splits its
rows across the ranks (`idx[rank::world]`). The rank's loss keeps the single-process normaliser:

    token     Σ_{its rows} m·ℓ · n / N_tokens       (N_tokens: the mask's sum over the whole batch)
    sequence  Σ_{its rows} ℓ̄_i · n / N_rows          (N_rows: eligible responses in the whole batch)
    fixed     Σ_{its rows} m·ℓ · n / (N_rows · L)

— `minibatch_scale` evaluated on the rank's own rows against the batch-wide counts turns the
algorithm's per-shard mean back into a sum over the shard, so the ranks' losses add up to the
single-process loss (a mean of per-rank means would not: it weights a short shard like a long
one). FSDP's reduce-scatter averages the gradients, so each rank back-propagates `world` times its
share (a divide factor of 1 would need ReduceOp.PREMUL_SUM, which gloo lacks); the gradient norm is
clipped over the full sharded parameters (DTensor grads), and AdamW steps each shard. Losses
whose normaliser is not a per-row count (MIS's narrowed mask, the NLL term's successful-token
mean, Clip-Cov/KL-Cov's batch-wide token choice) do not split this way and are refused when the
recipe loads (`learner_config.py`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.losses.corrections import effective_sample_size
from tracerl.algorithms.spec import Algorithm, PolicyOutput, StepContext
from tracerl.train.optim import make_optimizer, rl_schedule
from tracerl.train.roles import score_actions
from tracerl.train.update import minibatch_scale

_PREFIX = "model."  # parameter names under the scorer wrapper


class _Scorer(torch.nn.Module):
    """The policy's action scoring as the root module's forward, so FSDP gathers the root's own
    parameters (embeddings, final norm, output layer) around it and reduce-scatters their gradients."""

    def __init__(self, model, sampling: dict):
        super().__init__()
        self.model, self.sampling = model, sampling

    def forward(self, batch: Batch):
        out = score_actions(self.model, batch, **self.sampling)
        return out.logprobs_BT, out.full_logprobs_BT, out.entropy_BT


class ShardedPolicy:
    """One rank's share of the policy: FSDP2 over `mesh`, each decoder layer its own unit; the
    AdamW optimizer and warm-up schedule of the single-process `PolicyRole`, on the shards."""

    def __init__(self, model, *, lr: float, max_grad_norm: float, sampling: dict, mesh, schedule: dict | None = None):
        self.max_grad_norm = max_grad_norm
        self.names = [n for n, _ in model.named_parameters()]  # the single-process optimizer's parameter order
        self.scorer = _Scorer(model, {k: sampling[k] for k in ("temperature", "top_p", "top_k", "share_prefix") if k in sampling})
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        # Shared-prefix scoring runs each decoder layer several times per forward and hands the KV cache
        # from one call to the next inside a Cache object, where FSDP2 hangs no pre-backward hook: a layer
        # sharded on its own would be resharded before the backward reaches its prefix call. With it on,
        # the whole policy is one unit, gathered for the forward and backward of each minibatch
        # (gradients and AdamW moments stay sharded); with learner.share_prefix false each layer is its own.
        if not self.scorer.sampling.get("share_prefix", True):
            for layer in getattr(decoder, "layers", None) or []:
                fully_shard(layer, mesh=mesh)
        fully_shard(self.scorer, mesh=mesh)
        self.optimizer = make_optimizer(self.scorer, lr)
        self.scheduler = rl_schedule(self.optimizer, schedule)

    def score(self, batch: Batch) -> PolicyOutput:
        lp, full, ent = self.scorer(batch)
        return PolicyOutput(logprobs_BT=lp, full_logprobs_BT=full, entropy_BT=ent)

    def step(self, loss: torch.Tensor) -> float:
        """One optimizer step on this rank's loss; returns the global gradient norm before clipping."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(self.scorer.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return float(gnorm.full_tensor() if isinstance(gnorm, DTensor) else gnorm)

    # -- full tensors (collectives: every rank calls them; rank 0 gets the tensors) ----------------
    def full_weights(self) -> dict[str, torch.Tensor]:
        """The policy's full state dict (plain CPU tensors, the unwrapped model's names) on rank 0."""
        sd = get_model_state_dict(self.scorer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k.removeprefix(_PREFIX): v for k, v in sd.items()}

    def state_dict(self) -> dict:
        """Optimizer and schedule in the single-process `PolicyRole` format (parameters by index), on
        rank 0: a checkpoint resumes under any number of ranks."""
        osd = get_optimizer_state_dict(self.scorer, self.optimizer,
                                       options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        index = {n: i for i, n in enumerate(self.names)}
        state = {index[k.removeprefix(_PREFIX)]: v for k, v in osd.get("state", {}).items()}
        groups = [{**g, "params": [index[p.removeprefix(_PREFIX)] for p in g["params"]]}
                  for g in osd.get("param_groups", [])]
        return {"optimizer": {"state": state, "param_groups": groups}, "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a `PolicyRole`-format state (every rank passes the same full state)."""
        opt = state["optimizer"]
        osd = {"state": {_PREFIX + self.names[i]: v for i, v in opt["state"].items()},
               "param_groups": [{**g, "params": [_PREFIX + self.names[i] for i in g["params"]]}
                                for g in opt["param_groups"]]}
        set_optimizer_state_dict(self.scorer, self.optimizer, osd, options=StateDictOptions(full_state_dict=True))
        self.scheduler.load_state_dict(state["scheduler"])


def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    dist.all_reduce(x, group=group)
    return x


def sharded_policy_steps(algo: Algorithm, policy: ShardedPolicy, batch: Batch, rewards_B: torch.Tensor,
                         scores: dict[str, torch.Tensor], adv_BT: torch.Tensor, slices: list[torch.Tensor], *,
                         minibatches: int, ctx: StepContext, group=None) -> dict[str, float]:
    """The policy's optimizer steps of `rl_update`, this rank's rows of each minibatch.

    Every rank calls it with the same arguments (`slices`: the rows of each minibatch, as the
    single-process update's `minibatch_rows` chose them). A rank left without rows in a minibatch
    still runs its forward and backward on one row at zero weight, so the collectives line up. Returns the step's stats as
    `rl_update` reports them: `loss` the sum over ranks (the single-process loss), the other loss
    stats averaged over ranks weighted by their loss tokens, `grad_norm` the global norm.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    mask = batch.mask_BT
    eligible = (batch.weight_B > 0) & (mask.sum(dim=1) > 0)
    full_tokens, full_rows = float(mask.sum()), float(eligible.sum())
    ratios, acc, steps = [], {}, 0
    policy.scorer.train()
    for idx in slices:
        mine = idx[rank::world]
        share = 1.0 if mine.numel() else 0.0
        mine = mine if mine.numel() else idx[:1]
        mb = batch.rows(mine)
        T = mb.ids_BT.shape[1]
        out = policy.score(mb)
        loss, s = algo.loss(mb, out, {n: v[mine, :T] for n, v in scores.items()}, adv_BT[mine, :T], rewards_B[mine], ctx)
        loss = loss * minibatch_scale(algo.aggregation, mb.mask_BT, full_tokens, full_rows, minibatches) * share
        grad_norm = policy.step(loss * world)  # FSDP averages the ranks' gradients; the objective is their sum
        sel = mb.mask_BT > 0
        if share:
            ratios.append(torch.exp(out.logprobs_BT.detach() - mb.behavior_BT)[sel])
        s = {n: float(v) for n, v in s.items() if torch.as_tensor(v).numel() == 1}
        w = float(sel.sum()) * share
        names = sorted(s)
        vec = _all_reduce(torch.tensor([float(loss.detach()), w] + [s[n] * w for n in names], dtype=torch.float64), group)
        s = {n: float(vec[2 + i] / max(float(vec[1]), 1e-12)) for i, n in enumerate(names)}
        s |= {"loss": float(vec[0]), "grad_norm": grad_norm}
        for n, v in s.items():
            acc[n] = acc.get(n, 0.0) + v
        steps += 1
    policy.scorer.eval()
    out_stats = {n: v / steps for n, v in acc.items()}
    gathered: list = [None] * world
    dist.all_gather_object(gathered, torch.cat(ratios) if ratios else torch.zeros(0), group=group)
    w = torch.cat(gathered)
    out_stats |= {k: float(v) for k, v in effective_sample_size(w, torch.ones_like(w)).items()}
    return out_stats | {"updates": float(steps), "trained_rows": float(sum(s.numel() for s in slices))}

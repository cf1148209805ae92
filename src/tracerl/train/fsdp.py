"""The sharded policy of the FSDP2 learner (`learner.ranks > 1`): one copy of the policy per rank,
its parameters, gradients and AdamW moments sharded over the process group by `fully_shard`.

Every rank runs the one minibatch loop, `train/minibatch.py` `policy_steps`, with the same arguments;
`ShardedPolicy` is what it trains there (`score`, `step`, `module`). Data parallel over the
`Batch`'s rows when the loss is `row_separable`: each of the `minibatches` optimizer steps splits
its rows across the ranks (`idx[rank::world]`), and the rank's loss keeps the single-process
normaliser:

    token     Σ_{its rows} m·ℓ · n / N_tokens       (N_tokens: the mask's sum over the whole batch)
    sequence  Σ_{its rows} ℓ̄_i · n / N_rows          (N_rows: eligible responses in the whole batch)
    fixed     Σ_{its rows} m·ℓ · n / (N_rows · L)

— `minibatch_scale` evaluated on the rank's own rows against the batch-wide counts turns the
algorithm's per-shard mean back into a sum over the shard, so the ranks' losses add up to the
single-process loss (a mean of per-rank means would not: it weights a short shard like a long
one). FSDP's reduce-scatter averages the gradients, so each rank back-propagates `world` times its
share (a divide factor of 1 would need ReduceOp.PREMUL_SUM, which gloo lacks); the gradient norm is
clipped over the full sharded parameters (DTensor grads, `optimizer_step`), and AdamW steps each
shard. Losses whose normaliser is not a per-row count (MIS's narrowed mask, the NLL term's
successful-token mean, Clip-Cov/KL-Cov's minibatch-wide token choice, MOPD's ratio band) run the
whole minibatch on every rank instead: the same result, not data-parallel.

LoRA (`model.lora`): the peft-injected model is sharded like any other, its frozen base weights and
trainable adapter weights in the same FSDP2 units; only the adapter's gradients exist, are reduced
and are stepped (`make_optimizer` holds only them).

Checkpoints: `state_dict` gathers the optimizer to rank 0 in the single-process format (`learner.checkpoint_format:
full`); with `sharded` each rank writes and reads its own shard instead (`save_shards` / `restore_sharded`,
train/shards.py) and only the schedule and the optimizer's hyper-parameters travel as plain numbers.
"""

from __future__ import annotations

import torch
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)
from torch.distributed.fsdp import fully_shard

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.spec import PolicyOutput
from tracerl.train.optim import make_optimizer, optimizer_step, rl_schedule
from tracerl.train.roles import score_actions
from tracerl.train.shards import hyper_params, load_shards, restore_hyper_params, save_shards

_PREFIX = "model."  # parameter names under the scorer wrapper


class _Scorer(torch.nn.Module):
    """The policy's action scoring as the root module's forward, so FSDP gathers the root's own
    parameters (embeddings, final norm, output layer) around it and reduce-scatters their gradients."""

    def __init__(self, model, sampling: dict):
        super().__init__()
        self.model, self.sampling = model, sampling

    def forward(self, batch: Batch, support: torch.Tensor | None = None):
        out = score_actions(self.model, batch, **self.sampling, support=support)
        return out.logprobs_BT, out.full_logprobs_BT, out.entropy_BT, out.support_logprobs_BTK, out.support_ids_BTK


class ShardedPolicy:
    """One rank's share of the policy: FSDP2 over `mesh` (with shared-prefix scoring one unit, else each
    decoder layer its own); the AdamW optimizer and warm-up schedule of the single-process `PolicyRole`,
    on the shards."""

    def __init__(self, model, *, lr: float, max_grad_norm: float, sampling: dict, mesh, schedule: dict | None = None,
                 optimizer: str = "adamw"):
        self.max_grad_norm = max_grad_norm
        # the single-process optimizer's parameter order (`make_optimizer`: the trainable ones, all but a
        # LoRA model's frozen base weights)
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.scorer = _Scorer(model, {k: sampling[k] for k in ("temperature", "top_p", "top_k", "share_prefix", "packing")
                                          if k in sampling})
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        # Shared-prefix scoring runs each decoder layer several times per forward and hands the KV cache
        # from one call to the next inside a Cache object, where FSDP2 hangs no pre-backward hook: a layer
        # sharded on its own would be resharded before the backward reaches its prefix call. With it on,
        # the whole policy is one unit, gathered for the forward and backward of each minibatch
        # (gradients and AdamW moments stay sharded); with learner.share_prefix false each layer is its own.
        if not self.scorer.sampling.get("share_prefix", True):  # (packing needs share_prefix off)
            for layer in getattr(decoder, "layers", None) or []:
                fully_shard(layer, mesh=mesh)
        fully_shard(self.scorer, mesh=mesh)
        self.optimizer = make_optimizer(self.scorer, lr, kernel=optimizer)
        self.scheduler = rl_schedule(self.optimizer, schedule)

    @property
    def module(self) -> torch.nn.Module:
        return self.scorer

    def score(self, batch: Batch, support: torch.Tensor | None = None) -> PolicyOutput:
        lp, full, ent, sup_lp, sup_ids = self.scorer(batch, support)
        return PolicyOutput(logprobs_BT=lp, full_logprobs_BT=full, entropy_BT=ent, support_logprobs_BTK=sup_lp,
                            support_ids_BTK=sup_ids)

    def step(self, loss: torch.Tensor) -> float:
        """One optimizer step on this rank's loss (`optimizer_step`); returns the global gradient norm before clipping."""
        return optimizer_step(self.optimizer, self.scorer.parameters(), loss, self.max_grad_norm)

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

    # -- sharded checkpoints (train/shards.py; collectives: every rank calls them) ------------------
    def small_state(self) -> dict:
        """What a sharded checkpoint keeps outside the shards: the schedule and the optimizer's hyper-parameters."""
        return {"scheduler": self.scheduler.state_dict(), "param_groups": hyper_params(self.optimizer)}

    def save_shards(self, path: str) -> None:
        save_shards(self.scorer, self.optimizer, path, prefix=_PREFIX)

    def restore_sharded(self, state: dict, previous: ShardedPolicy | None) -> None:
        """Restore a `small_state` + shards: from the checkpoint's shard folder (`state["sharded"]["path"]`, set
        when the checkpoint is loaded), or, between two RL stages of one process, from the previous stage's
        policy on this rank (its optimizer's local shards; nothing crosses ranks)."""
        path = state["sharded"].get("path")
        if path is not None:
            load_shards(self.scorer, self.optimizer, path, prefix=_PREFIX)
        elif previous is not None:
            osd = get_optimizer_state_dict(previous.scorer, previous.optimizer)
            set_optimizer_state_dict(self.scorer, self.optimizer, osd)
        else:
            raise ValueError("a sharded policy state names no shard folder and no previous stage holds the shards")
        restore_hyper_params(self.optimizer, state["param_groups"])
        self.scheduler.load_state_dict(state["scheduler"])

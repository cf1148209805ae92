"""Model roles of an RL step: the policy being trained and the models that score its tokens.

A role wraps one model and answers one question about a `Batch`: the log-probabilities (and, for
the policy, entropies) of its ACTION tokens. The trainer asks the roles an algorithm declares
(`Algorithm.roles`, `Algorithm.needs`) and never looks at their models. Roles are in-process
objects here; a role hosted by another process or a Ray actor answers the same calls.

Scoring runs the decoder once, keeps the hidden states of the positions that predict an ACTION
token, and projects only those through the output layer, a chunk at a time
(`algorithms.logprobs.chunked_token_scores`): no `[B, T, V]` logits exist. Models whose output
layer is more than a linear map (logit soft-capping, a logit scale) are scored from their logits.
Rows that share a prompt (a GRPO group) run the decoder over it once (`train/shared_prefix.py`).
"""

from __future__ import annotations

import torch

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.logprobs import chunked_support_logprobs, chunked_token_scores
from tracerl.algorithms.spec import PolicyOutput
from tracerl.models.device import batch_to, model_device
from tracerl.models.lora import reference_view
from tracerl.models.precision import forward_context
from tracerl.train.optim import make_optimizer, optimizer_step, rl_schedule
from tracerl.train.shared_prefix import shared_prefix_hidden


def _decoder_and_head(model):
    """(decoder, output layer) when logits are exactly `head(decoder(...).last_hidden_state)`, else None."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        return None
    try:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if decoder is None or decoder is model or not isinstance(head, torch.nn.Linear):
        return None
    return decoder, head


def score_actions(model, batch: Batch, *, temperature: float, top_p: float = 1.0, top_k: int = 0,
                  chunk_size: int = 1024, share_prefix: bool = True,
                  support: int | torch.Tensor | None = None, packing: bool = False) -> PolicyOutput:
    """Log-probs (processed and full) and entropies of the batch's ACTION tokens under `model`; 0 elsewhere.

    Gradients flow when autograd is on. Position t's token is predicted from position t − 1. The batch
    is moved to the model's device and the answer comes back on the batch's; the forward runs under the
    model's autocast (`models/precision.py`). With `share_prefix` the rows' shared prefixes run once
    (`train/shared_prefix.py`), else each row runs whole without a KV cache. `support` (an int K, or ids
    `[B, T, K]`) also scores K tokens per ACTION position (`PolicyOutput.support_logprobs_BTK`).
    """
    home = batch.ids_BT.device
    batch = batch_to(batch, model_device(model))
    if isinstance(support, torch.Tensor):
        support = support.to(batch.ids_BT.device)
    if packing:  # rows end to end, no padding (train/packing.py)
        from tracerl.train.packing import packed_scores

        out = packed_scores(model, _decoder_and_head(model), batch, temperature=temperature, top_p=top_p,
                            top_k=top_k, chunk_size=chunk_size, support=support)
    else:
        out = score_tokens(model, batch.ids_BT, batch.attn_BT, batch.action_BT, temperature=temperature, top_p=top_p,
                           top_k=top_k, chunk_size=chunk_size, share_prefix=share_prefix, support=support)
    if home == batch.ids_BT.device:
        return out
    return PolicyOutput(**{k: None if v is None else v.to(home) for k, v in vars(out).items()})


def score_tokens(model, ids_BT: torch.Tensor, attn_BT: torch.Tensor, action_BT: torch.Tensor, *, temperature: float,
                 top_p: float = 1.0, top_k: int = 0, chunk_size: int = 1024, share_prefix: bool = True,
                 support: int | torch.Tensor | None = None) -> PolicyOutput:
    """`score_actions` on bare tensors already on the model's device (the SFT loss uses it at temperature 1)."""
    sel = action_BT[:, 1:] > 0
    targets = ids_BT[:, 1:][sel]
    parts = _decoder_and_head(model)
    with forward_context(model):
        if parts is not None:
            split = shared_prefix_hidden(parts[0], ids_BT, attn_BT, action_BT) if share_prefix else None
            if split is None:
                hidden = parts[0](input_ids=ids_BT, attention_mask=attn_BT, use_cache=False).last_hidden_state
                hidden = hidden[:, :-1][sel]
            else:  # columns [P, T) ran per row on the shared prefixes' cache: no ACTION is predicted before P
                P, tail = split
                hidden = tail[:, :-1][sel[:, P:]]
            x, head = hidden, parts[1]
        else:
            x, head = model(input_ids=ids_BT, attention_mask=attn_BT, use_cache=False).logits[:, :-1][sel], None
        logp, ent, full = chunked_token_scores(x, targets, lm_head=head, chunk_size=chunk_size,
                                               temperature=temperature, top_p=top_p, top_k=top_k)
        if support is not None:
            sup = support if isinstance(support, int) else support[:, 1:][sel]
            sup_lp, sup_ids = chunked_support_logprobs(x, sup, lm_head=head, chunk_size=chunk_size,
                                                       temperature=temperature)

    def place(x: torch.Tensor) -> torch.Tensor:
        """Values `[N, ...]` of the positions `sel` (predicting token t + 1) as `[B, T, ...]`, 0 elsewhere."""
        shifted = torch.zeros((*sel.shape, *x.shape[1:]), dtype=x.dtype, device=x.device)
        shifted = shifted.masked_scatter(sel.view(*sel.shape, *[1] * (x.dim() - 1)).expand_as(shifted), x)
        return torch.cat([torch.zeros_like(shifted[:, :1]), shifted], dim=1)

    lp = place(logp)
    out = PolicyOutput(logprobs_BT=lp, full_logprobs_BT=lp if full is logp else place(full), entropy_BT=place(ent))
    if support is not None:
        out.support_logprobs_BTK, out.support_ids_BTK = place(sup_lp), place(sup_ids)
    return out


class PolicyRole:
    """The policy: its model, AdamW optimizer and warm-up schedule, scored under the sampling distribution."""

    def __init__(self, model, *, lr: float, max_grad_norm: float, sampling: dict, state: dict | None = None,
                 share_prefix: bool = True, schedule: dict | None = None, packing: bool = False,
                 max_tokens_per_micro_batch: int | None = None, optimizer: str = "adamw"):
        self.model, self.max_grad_norm = model, max_grad_norm
        self.scoring = {k: sampling[k] for k in ("temperature", "top_p", "top_k")} | {"share_prefix": share_prefix}
        self.scoring |= {"packing": True} if packing else {}
        self.micro_tokens = max_tokens_per_micro_batch  # gradient accumulation over token-budget micro-batches
        self.optimizer = make_optimizer(model, lr, kernel=optimizer)
        self.scheduler = rl_schedule(self.optimizer, schedule)
        if state and "sharded" in state:  # a sharded learner's checkpoint, resharded into one process (train/shards.py)
            from tracerl.train.shards import load_shards, restore_hyper_params

            if state["sharded"].get("path") is None:
                raise ValueError("a sharded policy state names no shard folder to load in one process")
            load_shards(self.model, self.optimizer, state["sharded"]["path"], sharded=False)
            restore_hyper_params(self.optimizer, state["param_groups"])
            self.scheduler.load_state_dict(state["scheduler"])
        elif state:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])

    def score(self, batch: Batch, support: torch.Tensor | None = None) -> PolicyOutput:
        return score_actions(self.model, batch, **self.scoring, support=support)

    @property
    def module(self) -> torch.nn.Module:
        """The module the optimizer steps (train / eval mode around the policy's steps)."""
        return self.model

    def step(self, loss: torch.Tensor) -> float:
        """One optimizer step on `loss` (`optimizer_step`); returns the gradient norm before clipping."""
        return optimizer_step(self.optimizer, self.model.parameters(), loss, self.max_grad_norm)

    def train_steps(self, algo, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor],
                    adv_BT: torch.Tensor, slices: list[torch.Tensor], *, minibatches: int, ctx) -> dict[str, float]:
        """The policy's optimizer steps of `rl_update`, one per slice (`train/minibatch.py` `policy_steps`), here."""
        from tracerl.train.minibatch import policy_steps

        return policy_steps(algo, self, batch, rewards_B, scores, adv_BT, slices, minibatches=minibatches, ctx=ctx,
                            micro_tokens=self.micro_tokens, packed=self.scoring.get("packing", False))

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}


class FrozenRole:
    """A model that only scores (the KL reference; a teacher): full tempered log-probs, no gradient."""

    def __init__(self, model, *, temperature: float, share_prefix: bool = True):
        self.model, self.temperature, self.share_prefix = model, temperature, share_prefix

    @torch.no_grad()
    def score(self, batch: Batch, support: int | None = None) -> PolicyOutput:
        model, ctx = reference_view(self.model)  # a frozen copy, or the policy with its LoRA adapter off
        with ctx:
            return score_actions(model, batch, temperature=self.temperature, share_prefix=self.share_prefix,
                                 support=support)

    def logprobs(self, batch: Batch) -> torch.Tensor:
        return self.score(batch).full_logprobs_BT


class Roles:
    """The roles of one RL stage, and the per-token tensors an algorithm asks of them."""

    def __init__(self, policy: PolicyRole, reference: FrozenRole | None = None, aux: dict | None = None):
        self.policy, self.reference = policy, reference
        self.aux = aux or {}  # critic, prm, teacher/<name> (`train/aux_roles.py`)

    @torch.no_grad()
    def scores(self, batch: Batch, needs: set[str]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if "reference" in needs:
            if self.reference is None:
                raise ValueError("the algorithm needs reference log-probs but the trainer holds no reference role")
            out["reference"] = self.reference.logprobs(batch)
        if "proximal" in needs:  # the policy as it is before this update: the trust-region centre
            self.policy.model.eval()
            out["proximal"] = self.policy.score(batch).logprobs_BT
        for role in self.aux.values():
            if needs & role.provides:
                out |= role.scores(batch, needs)
        return out

    def warming_up(self, step: int) -> bool:
        """True while an auxiliary role is still in its pretraining steps (the policy is not updated)."""
        return any(step < r.warmup_steps for r in self.aux.values())

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(),
                **{n: r.trained.state_dict() for n, r in self.aux.items() if hasattr(r, "trained")}}

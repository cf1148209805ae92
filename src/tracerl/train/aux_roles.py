"""Auxiliary model roles of an RL step: the critic, the implicit PRM, frozen teachers.

Each role answers the per-token tensors it `provides` (the names an `Algorithm.needs`), and a trained
role also gives a forward with gradient (`forward`) and takes an optimizer step on the loss the
algorithm builds from it (`Algorithm.role_loss`). Its weights, AdamW state and schedule travel in
`state_dict`, which the trainer stores in `RLState.roles_state[<role>]` (so in `trainer_state.pt`).
These are replicated roles: one copy each, in the trainer's (driver) process or on a Ray actor of its own
(`placement.<role>.where: ray`: `placement/remote_roles.py` for teachers, `placement/remote_trained.py` for
the critic and PRM, which answer the same calls), trained by `rl_update` whether the policy trains in
that process or sharded over `learner.ranks` processes.

Built only for the roles an algorithm declares (`Algorithm.roles`), from `recipe.roles`:
- `critic`: a value head (a linear map to one number) over the hidden states of a decoder — a copy
  of the policy at the start of RL when `roles.critic.path` is null, else a local HF model;
- `prm`: PRIME's implicit process reward model π_φ, a trained copy of the policy at the start of RL;
- `teacher/<name>`: each `roles.teachers` entry, a frozen model loaded from a local checkpoint.
"""

from __future__ import annotations

import copy

import torch

from tracerl.algorithms.batch import Batch
from tracerl.errors import UserError
from tracerl.models.device import model_device
from tracerl.models.precision import forward_context
from tracerl.train.checkpoint import freeze
from tracerl.train.model_setup import place_role
from tracerl.train.optim import make_optimizer, optimizer_step, warmup_constant
from tracerl.train.roles import FrozenRole, score_actions


def _decoder(model):
    try:
        dec = model.get_decoder()
    except (AttributeError, NotImplementedError):
        dec = None
    if dec is None or dec is model:
        raise UserError(f"{type(model).__name__} exposes no decoder (get_decoder) to put a value head on; "
                        "set roles.critic.path to a causal LM of the standard Hugging Face layout")
    return dec


class _Trained:
    """Shared optimizer plumbing of a trained auxiliary role (composition: each role holds one)."""

    def __init__(self, module: torch.nn.Module, *, lr: float, max_grad_norm: float, warmup: int = 3,
                 optimizer: str = "adamw"):
        self.module, self.max_grad_norm = module, max_grad_norm
        for p in module.parameters():
            p.requires_grad_(True)
        self.optimizer = make_optimizer(module, lr, kernel=optimizer)
        self.scheduler = warmup_constant(self.optimizer, warmup=warmup)

    def step(self, loss: torch.Tensor) -> float:
        """One optimizer step on `loss` (`optimizer_step`); returns the gradient norm before clipping."""
        return optimizer_step(self.optimizer, self.module.parameters(), loss, self.max_grad_norm)

    def state_dict(self) -> dict:
        return {"weights": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["weights"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


class CriticRole:
    """V(s_t) for every ACTION token t: a value head on the hidden state of the position before it,
    i.e. the value of the context the token is sampled from. `pretrain_steps` RL steps train only it."""

    provides = frozenset({"values"})

    def __init__(self, lm, *, lr: float, max_grad_norm: float, pretrain_steps: int, optimizer: str = "adamw"):
        decoder, self.lm = _decoder(lm), lm
        with torch.random.fork_rng(devices=[]):  # building a role must not move the run's random stream (resume)
            head = torch.nn.Linear(lm.config.hidden_size, 1)
        head = head.to(model_device(decoder))
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
        self.trained = _Trained(torch.nn.ModuleDict({"decoder": decoder, "head": head}), lr=lr,
                                max_grad_norm=max_grad_norm, optimizer=optimizer)
        self.warmup_steps = pretrain_steps

    def forward(self, batch: Batch) -> torch.Tensor:
        """`values_BT` with gradient, 0 off the ACTION tokens."""
        m, home = self.trained.module, batch.ids_BT.device
        dev = model_device(m)
        with forward_context(self.lm):
            hidden = m["decoder"](input_ids=batch.ids_BT.to(dev), attention_mask=batch.attn_BT.to(dev),
                                  use_cache=False).last_hidden_state
            v = m["head"](hidden[:, :-1]).squeeze(-1).float()
        v = torch.cat([torch.zeros_like(v[:, :1]), v], dim=1).to(home)
        return v * batch.action_BT

    @torch.no_grad()
    def scores(self, batch: Batch, needs: set[str]) -> dict[str, torch.Tensor]:
        self.trained.module.eval()
        out = {"values": self.forward(batch)}
        self.trained.module.train()
        return out

    def train_steps(self, algo, name: str, batch: Batch, rewards_B, scores, eligible, slices, *, minibatches: int, ctx):
        """This role's optimizer steps of `rl_update` on the minibatch `slices` (train/update.py `role_steps`), here."""
        from tracerl.train.update import role_steps

        return role_steps(algo, self, name, batch, rewards_B, scores, eligible, slices, minibatches=minibatches, ctx=ctx)


class PRMRole:
    """PRIME's implicit PRM π_φ: a trained copy of the policy scored like the reference (full tempered
    log-probs), so β·(log π_φ − log π_ref) is its token reward."""

    provides = frozenset({"prm"})
    warmup_steps = 0

    def __init__(self, lm, *, lr: float, max_grad_norm: float, temperature: float, share_prefix: bool = True,
                 optimizer: str = "adamw"):
        self.trained = _Trained(lm, lr=lr, max_grad_norm=max_grad_norm, optimizer=optimizer)
        self.temperature, self.share_prefix = temperature, share_prefix

    def forward(self, batch: Batch) -> torch.Tensor:
        return score_actions(self.trained.module, batch, temperature=self.temperature,
                             share_prefix=self.share_prefix).full_logprobs_BT

    @torch.no_grad()
    def scores(self, batch: Batch, needs: set[str]) -> dict[str, torch.Tensor]:
        self.trained.module.eval()
        out = {"prm": self.forward(batch)}
        self.trained.module.train()
        return out

    def train_steps(self, algo, name: str, batch: Batch, rewards_B, scores, eligible, slices, *, minibatches: int, ctx):
        """This role's optimizer steps of `rl_update` on the minibatch `slices` (train/update.py `role_steps`), here."""
        from tracerl.train.update import role_steps

        return role_steps(algo, self, name, batch, rewards_B, scores, eligible, slices, minibatches=minibatches, ctx=ctx)


class TeacherRole:
    """A frozen teacher: full tempered log-probs of the student's tokens under `teacher/<name>`; with
    `support` K > 0 also its K most likely tokens at each of those positions and their log-probs
    (`teacher/<name>@support_ids`, `@support_lp`, `[B, T, K]`), from the same forward pass."""

    warmup_steps = 0

    def __init__(self, name: str, lm, *, temperature: float, share_prefix: bool = True, support: int = 0,
                 placed: dict | None = None):
        self.need, self.support = f"teacher/{name}", support
        self.provides = frozenset({"teachers"})  # the algorithm asks for all teachers; each answers its own
        kw = dict(temperature=temperature, share_prefix=share_prefix)
        if placed is None:
            self.frozen = FrozenRole(freeze(lm), **kw)
        else:  # on a Ray actor of its own (`placement.teachers`): spec, device, threads
            from tracerl.placement.remote_roles import RemoteFrozenRole

            self.frozen = RemoteFrozenRole(self.need, freeze(lm), **kw, **placed, record_as="teachers")

    def scores(self, batch: Batch, needs: set[str]) -> dict[str, torch.Tensor]:
        out = self.frozen.score(batch, support=self.support or None)
        if not self.support:
            return {self.need: out.full_logprobs_BT}
        return {self.need: out.full_logprobs_BT, f"{self.need}@support_lp": out.support_logprobs_BTK,
                f"{self.need}@support_ids": out.support_ids_BTK}


AUX_ROLES = ("critic", "prm", "teachers")  # names an `Algorithm.roles` may declare beside policy and reference


def _load_lm(path: str, what: str, tokenizer):
    from pathlib import Path

    from tracerl.models import load_model_and_tokenizer

    if not (Path(path) / "config.json").is_file():
        raise UserError(f"{what} {path!r} is not a Hugging Face model directory; point it at a checkpoint of an "
                        "earlier tracerl run (runs/<run>/checkpoints/step_N) or another local model")
    lm, tok = load_model_and_tokenizer(path)
    if tokenizer is not None and tok.get_vocab() != tokenizer.get_vocab():
        raise UserError(f"{what} {path!r} has a different tokenizer than the policy; start the policy from the same "
                        "base model (model.path: <teacher run>/base_model) so token ids mean the same")
    return lm


def _placed(recipe, role: str, device: str | None, what: str) -> dict | None:
    """Where `placement.<role>` puts a role's actor (spec, device, threads), or None for the trainer's process."""
    spec = getattr(recipe.placement, role)
    if spec.where != "ray":
        return None
    from tracerl.models.device import resolve_device

    dev = resolve_device(device, default=recipe.model.device, what=what if device is not None else "model.device")
    return {"spec": spec, "device": str(dev), "threads": recipe.run.threads}


def _trained(recipe, role: str, lm, device: str | None, what: str, make):
    """`make(lm)` here on its device, or on its Ray actor (`placement.critic` / `.prm`, placement/remote_trained.py)."""
    placed = _placed(recipe, role, device, what)
    if placed is None:
        return make(place_role(lm, recipe, device, what=what))
    from tracerl.placement.remote_trained import RemoteTrainedRole

    return RemoteTrainedRole(role, place_role(lm, recipe, "cpu", what=what), make, **placed)


def build_aux_roles(recipe, policy, state: dict | None, tokenizer=None) -> dict:
    """The auxiliary roles the recipe's algorithm declares, restored from `state` (roles_state) if given."""
    import functools

    algo, cfg, temp, share = recipe.rl.algorithm, recipe.roles, recipe.sampling.temperature, recipe.learner.share_prefix
    declared, roles = algo.roles(), {}
    if "critic" in declared:
        c = cfg.critic_or_default
        lm = copy.deepcopy(policy) if c.path is None else _load_lm(c.path, "roles.critic.path", tokenizer)
        roles["critic"] = _trained(recipe, "critic", lm, c.device, "roles.critic.device", functools.partial(
            CriticRole, lr=c.lr, max_grad_norm=recipe.rl.max_grad_norm, pretrain_steps=c.pretrain_steps,
            optimizer=recipe.learner.optimizer))
    if "prm" in declared:
        p = cfg.prm_or_default
        roles["prm"] = _trained(recipe, "prm", copy.deepcopy(policy), p.device, "roles.prm.device", functools.partial(
            PRMRole, lr=p.lr, max_grad_norm=recipe.rl.max_grad_norm, temperature=temp, share_prefix=share,
            optimizer=recipe.learner.optimizer))
    if "teachers" in declared:
        for t in cfg.teachers:
            what = f"roles.teachers ({t.name}) device"
            placed = _placed(recipe, "teachers", t.device, what)
            lm = place_role(_load_lm(t.path, f"teacher {t.name!r} path", tokenizer), recipe,
                            "cpu" if placed else t.device, what=what)  # a placed teacher goes to its device there
            roles[f"teacher/{t.name}"] = TeacherRole(t.name, lm, temperature=temp, share_prefix=share,
                                                     support=algo.teacher_support, placed=placed)
    for name, role in roles.items():
        if state and name in state and hasattr(role, "trained"):
            role.trained.load_state_dict(state[name])
    return roles

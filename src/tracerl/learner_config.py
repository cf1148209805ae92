"""The `learner:` section of a recipe: how many processes train the policy (`train/fsdp_group.py`) and how
it scores a minibatch (`train/shared_prefix.py`)."""

from __future__ import annotations

import torch
from pydantic import Field

from tracerl.rl_config import _Cfg
from tracerl.algorithms.spec.terms import MIS


class LearnerConfig(_Cfg):
    ranks: int = Field(1, ge=1, le=64)
    """Learner processes of the RL stage; above 1 the policy is sharded over them with FSDP2 (gloo,
    CPU) and each minibatch's rows are split across them, with the single-process update's result
    (docs/training.md, "Sharded learner (FSDP2)"). 1: the policy trains in the trainer's process."""
    share_prefix: bool = True
    """Run the prefix common to a minibatch's rows (system prompt, template) and each distinct prompt
    once, and only the rows' continuations per row (`train/shared_prefix.py`), in the RL learner and
    in SFT: the same log-probs and gradients up to float rounding, about half the learner's forward
    and backward on GRPO groups. false: every row runs its whole sequence."""


def check_learner(recipe) -> str | None:
    """One sentence when `learner.ranks > 1` meets what the sharded learner does not run yet, else None."""
    ranks = recipe.learner.ranks
    if ranks == 1:
        return None
    algo, why = recipe.rl.algorithm, None
    device = getattr(recipe.model, "device", "cpu")  # model.device / model.lora: the placement keys, where present
    if getattr(recipe.model, "lora", None) is not None:
        why = "model.lora (the ranks shard and train every weight); use model.lora=null or learner.ranks: 1"
    elif device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        why = f"model.device {device!r}: the ranks run on CPU (gloo) for now; set model.device=cpu or learner.ranks: 1"
    elif recipe.rl.mode == "async":
        why = "rl.mode: async (its learner runs beside the rollout workers in one process); use rl.mode: sync"
    elif algo.roles() - {"policy", "reference"}:
        extra = ", ".join(sorted(algo.roles() - {"policy", "reference"}))
        why = f"algorithm {algo.name!r}, whose {extra} role(s) train in the trainer's process; use learner.ranks: 1"
    else:
        whole = [n for n, on in (("correction: mis", isinstance(algo.correction, MIS)), ("nll", algo.nll is not None),
                                 ("clip_cov", algo.clip_cov is not None), ("kl_cov", algo.kl_cov is not None)) if on]
        if whole:
            why = (f"rl.algorithm {', '.join(whole)}, whose loss is normalised over the whole minibatch, not per row, "
                   "so it does not split across ranks; remove it or use learner.ranks: 1")
    return f"learner.ranks: {ranks} does not run with {why}" if why else None

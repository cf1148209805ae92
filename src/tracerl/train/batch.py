"""Pack token sequences into right-padded tensors and compute the learner's log-probabilities."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tracerl.contract.roles import TokenRole


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence: (ids_BT, attention_mask_BT)."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def action_mask(roles_list: Sequence[Sequence[int]], T: int) -> torch.Tensor:
    """1.0 where the token is an ACTION (derived from roles, the single source of truth)."""
    m = torch.zeros((len(roles_list), T))
    for i, roles in enumerate(roles_list):
        m[i, : len(roles)] = torch.as_tensor([1.0 if r == TokenRole.ACTION else 0.0 for r in roles])
    return m


def token_logprobs(model, ids_BT: torch.Tensor, attn_BT: torch.Tensor, *, temperature: float = 1.0,
                   with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token_t | tokens_<t) at every position t >= 1 (position 0 gets 0), shape [B, T].

    Logits are divided by the sampling temperature so the learner scores tokens under the same
    distribution the engine sampled them from.
    """
    logits = model(input_ids=ids_BT, attention_mask=attn_BT).logits[:, :-1].float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    lp = logp.gather(-1, ids_BT[:, 1:, None]).squeeze(-1)
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    ent = None
    if with_entropy:
        with torch.no_grad():
            e = -(logp.exp() * logp).sum(-1)
            ent = torch.cat([torch.zeros_like(e[:, :1]), e], dim=1)
    return lp, ent

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

from tracerl.algorithms.registry import register


def _head(lm_head) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(lm_head, torch.Tensor):
        return lm_head, None
    return lm_head.weight, getattr(lm_head, "bias", None)


def _chunk_stats(z: torch.Tensor, targets: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    z = z if z.dtype == torch.float64 else z.float()
    if temperature != 1.0:
        z = z / temperature
    lse = torch.logsumexp(z, dim=-1)
    safe = targets.clamp_min(0)
    logp = z.gather(-1, safe[:, None])[:, 0] - lse
    logp = torch.where(targets >= 0, logp, torch.zeros_like(logp))
    entropy = lse - (torch.softmax(z, dim=-1) * z).sum(dim=-1)
    return logp, entropy


def _from_hidden(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor, temperature: float):
    z = h @ weight.t()
    if bias is not None:
        z = z + bias
    return _chunk_stats(z, targets, temperature)


@register("token_logprobs_and_entropy", kind="util",
          description="chunked token log-probabilities and entropies for large vocabularies (logits or hidden + lm_head)",
          source="Liger-Kernel (Hsu et al. 2024); Wijmans et al. 2024 (Cut Cross-Entropy); pure-torch chunking")
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
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    B, T = targets_BT.shape
    if logits_or_hidden.shape[:2] != (B, T):
        raise ValueError(f"inputs {tuple(logits_or_hidden.shape)} do not match targets {tuple(targets_BT.shape)}")
    x = logits_or_hidden.reshape(B * T, logits_or_hidden.shape[-1])
    targets = targets_BT.reshape(B * T).long()
    grad = torch.is_grad_enabled()
    weight = bias = None
    if lm_head is not None:
        weight, bias = _head(lm_head)
        grad = grad and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    else:
        grad = grad and x.requires_grad
    logps, ents = [], []
    for s in range(0, B * T, chunk_size):
        xc, tc = x[s:s + chunk_size], targets[s:s + chunk_size]
        if lm_head is not None:
            args = (xc, weight, bias, tc, temperature)
            out = checkpoint(_from_hidden, *args, use_reentrant=False) if grad else _from_hidden(*args)
        else:
            args = (xc, tc, temperature)
            out = checkpoint(_chunk_stats, *args, use_reentrant=False) if grad else _chunk_stats(*args)
        logps.append(out[0])
        ents.append(out[1])
    return torch.cat(logps).view(B, T), torch.cat(ents).view(B, T)


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

"""Run the decoder once per distinct prompt of a batch, not once per row.

A GRPO batch holds `group_size` rows per prompt, and the prompt is most of each row (115 of ~190
tokens in the default recipe). `shared_prefix_hidden` splits every row at one column P, no later
than the position that predicts the batch's first ACTION token: columns `[0, P)` of the distinct
rows are run once with a KV cache, the cache is gathered to the rows (autograd sums the rows'
gradients back into it), and only columns `[P, T)` are run per row. The hidden states of every
position that predicts an ACTION token, and the gradients into the weights, are those of the plain
forward up to float rounding (`tests/train/test_shared_prefix.py`); the forward and backward cost
about (distinct prompts · P + rows · (T − P)) tokens instead of rows · T.

It applies only where the split is exact: a plain decoder whose cache is `DynamicCache` of full
attention layers (no sliding window, no linear-attention or recurrent state), without gradient
checkpointing (which turns the cache off). Anything else, or a batch whose rows share no prompt,
returns None and the caller runs the plain forward.
"""

from __future__ import annotations

import inspect
import weakref

import torch

from tracerl.models.precision import checkpointing_enabled

MIN_PREFIX = 8  # a shorter common prefix saves less than the second call costs
_UNSUPPORTED: weakref.WeakSet = weakref.WeakSet()  # decoders whose cache cannot be split (tried once)


def split_column(ids_BT: torch.Tensor, attn_BT: torch.Tensor, action_BT: torch.Tensor) -> int:
    """The last column P at which every row can be split: one before the first ACTION token of the row
    whose first ACTION token comes earliest (that position's hidden state predicts it), and no later
    than the shortest row."""
    has, length = action_BT > 0, attn_BT.sum(dim=1)
    bound = torch.where(has.any(dim=1), has.float().argmax(dim=1) - 1, length)
    return max(int(torch.minimum(bound, length).min()), 0)


def _cache_kwarg(decoder) -> str:
    params = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _splittable(cache) -> bool:
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = getattr(cache, "layers", None)
    return type(cache) is DynamicCache and bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def shared_prefix_hidden(decoder, ids_BT: torch.Tensor, attn_BT: torch.Tensor,
                         action_BT: torch.Tensor) -> tuple[int, torch.Tensor] | None:
    """(P, hidden states of columns [P, T) of every row), or None when the batch or model does not
    allow the split (see the module docstring)."""
    if decoder in _UNSUPPORTED or (decoder.training and checkpointing_enabled(decoder)):
        return None
    P = split_column(ids_BT, attn_BT, action_BT)
    if P < MIN_PREFIX or P >= ids_BT.shape[1]:
        return None
    prefixes, row_to_prefix = torch.unique(ids_BT[:, :P], dim=0, return_inverse=True)
    if prefixes.shape[0] == ids_BT.shape[0]:
        return None  # no two rows share their first P tokens
    arg = _cache_kwarg(decoder)
    pre = decoder(input_ids=prefixes, attention_mask=torch.ones_like(prefixes), use_cache=True)
    cache = getattr(pre, "cache", None) if arg == "cache" else None
    cache = cache if cache is not None else getattr(pre, "past_key_values", None)
    if cache is None or not _splittable(cache):
        _UNSUPPORTED.add(decoder)
        return None
    cache.batch_select_indices(row_to_prefix.to(prefixes.device))
    positions = torch.arange(P, ids_BT.shape[1], device=ids_BT.device)[None].expand(ids_BT.shape[0], -1)
    out = decoder(input_ids=ids_BT[:, P:], attention_mask=attn_BT, position_ids=positions, use_cache=True,
                  **{arg: cache})
    return P, out.last_hidden_state

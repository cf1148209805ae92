"""Run the decoder once per distinct prefix of a batch, not once per row.

A GRPO batch holds `group_size` rows per prompt, and the prompt is most of each row (115 of ~190
tokens in the default recipe); every row of an SFT batch starts with the same system prompt (195
tokens of tool schema in calc_json). `shared_prefix_hidden` splits the rows at up to two columns,
no later than the position that predicts the batch's first ACTION token:

1. L, the prefix common to every row (system prompt, template header): run once, as one row;
2. P, the end of each row's prompt: columns `[L, P)` run once per distinct prompt, on (1)'s KV cache.

The cache is gathered to the rows (autograd sums the rows' gradients back into it), and only
columns `[P, T)` run per row. The hidden states of every position that predicts an ACTION token, and
the gradients into the weights, are the plain forward's up to float rounding
(`tests/train/test_shared_prefix.py`); the forward and backward cost L + prompts · (P − L) +
rows · (T − P) tokens instead of rows · T. A level that shares nothing, or fewer than `MIN_PREFIX`
tokens, is skipped.

It applies only where the split is exact: a plain decoder whose cache is `DynamicCache` of full
attention layers (no sliding window, no linear-attention or recurrent state), without gradient
checkpointing (which turns the cache off). Anything else, or a batch whose rows share nothing,
returns None and the caller runs the plain forward.
"""

from __future__ import annotations

import inspect
import weakref

import torch

from tracerl.models.precision import checkpointing_enabled

MIN_PREFIX = 8  # a shorter shared span saves less than one more decoder call costs
# From this many embedding entries on, the rows are embedded in one lookup and each decoder call takes its slice
# (`inputs_embeds`): each lookup's backward is a dense [V, H] gradient of its own, zero-filled, then summed into
# the weight's (SmolLM2-135M: three of 113 MB an update, 4 x 50-170 ms of fill with the head's; torch.profiler).
# Below it (the tiny model) each call looks its rows up itself, as before, bit for bit.
ONE_LOOKUP_MIN = 1 << 22
_UNSUPPORTED: weakref.WeakSet = weakref.WeakSet()  # decoders whose cache cannot be split (tried once)


def split_column(ids_BT: torch.Tensor, attn_BT: torch.Tensor, action_BT: torch.Tensor) -> int:
    """The last column P at which every row can be split: one before the first ACTION token of the row
    whose first ACTION token comes earliest (that position's hidden state predicts it), and no later
    than any row's first padding column (a left-padded row shares nothing)."""
    has, pad = action_BT > 0, attn_BT == 0
    length = torch.where(pad.any(dim=1), pad.float().argmax(dim=1), attn_BT.shape[1])  # first padding column
    bound = torch.where(has.any(dim=1), has.float().argmax(dim=1) - 1, length)
    return max(int(torch.minimum(bound, length).min()), 0)


def split_levels(ids_BT: torch.Tensor, attn_BT: torch.Tensor, action_BT: torch.Tensor) -> list[int]:
    """The columns the rows are split at, increasing: [L] (all rows' common prefix), [P] (the prompts,
    some shared), [L, P], or [] when nothing worth a decoder call is shared."""
    B = ids_BT.shape[0]
    P = split_column(ids_BT, attn_BT, action_BT)
    if B < 2 or P < MIN_PREFIX:
        return []
    differs = (ids_BT[:, :P] != ids_BT[:1, :P]).any(dim=0)
    L = int(differs.float().argmax()) if differs.any() else P
    levels = [L] if L >= MIN_PREFIX else []
    if P - (L if levels else 0) >= MIN_PREFIX and torch.unique(ids_BT[:, :P], dim=0).shape[0] < B:
        levels.append(P)
    return levels


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
    levels = split_levels(ids_BT, attn_BT, action_BT)
    if not levels:
        return None
    arg, dev = _cache_kwarg(decoder), ids_BT.device
    embed = decoder.get_input_embeddings()
    embeds = embed(ids_BT) if isinstance(embed, torch.nn.Embedding) and embed.weight.numel() >= ONE_LOOKUP_MIN else None

    def tokens(rows, a: int, b: int | None) -> dict:  # a decoder call's input: ids, or their slice of the lookup
        return {"input_ids": ids_BT[rows, a:b]} if embeds is None else {"inputs_embeds": embeds[rows, a:b]}

    cache, inverse_prev, start = None, None, 0  # inverse_prev: each batch row's cache row (its distinct prefix)
    for end in levels:
        _, inverse = torch.unique(ids_BT[:, :end], dim=0, return_inverse=True)
        first = torch.zeros(int(inverse.max()) + 1, dtype=torch.long, device=dev).scatter_(
            0, inverse, torch.arange(ids_BT.shape[0], device=dev))  # a batch row of each distinct prefix
        if cache is not None:  # each new distinct prefix continues the cache row of its beginning
            cache.batch_select_indices(inverse_prev[first])
        positions = torch.arange(start, end, device=dev)[None].expand(first.shape[0], -1)
        out = decoder(**tokens(first, start, end), position_ids=positions, use_cache=True,
                      attention_mask=torch.ones((first.shape[0], end), dtype=attn_BT.dtype, device=dev),
                      **({arg: cache} if cache is not None else {}))
        cache = _cache_of(out, arg)
        if cache is None or not _splittable(cache):
            _UNSUPPORTED.add(decoder)
            return None
        inverse_prev, start = inverse, end
    cache.batch_select_indices(inverse_prev)  # every row reads its prompt's cache row
    positions = torch.arange(start, ids_BT.shape[1], device=dev)[None].expand(ids_BT.shape[0], -1)
    out = decoder(**tokens(slice(None), start, None), attention_mask=attn_BT, position_ids=positions, use_cache=True,
                  **{arg: cache})
    return start, out.last_hidden_state


def _cache_of(out, arg: str):
    cache = getattr(out, "cache", None) if arg == "cache" else None
    return cache if cache is not None else getattr(out, "past_key_values", None)

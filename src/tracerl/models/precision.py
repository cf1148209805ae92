"""Mixed precision and gradient checkpointing for a model (`model.autocast`, `model.gradient_checkpointing`).

`set_autocast(model, "bf16")` records the setting on the model (a plain attribute: deep copies made
for the reference, critic or PRM inherit it); `forward_context(model)` is the context every model
forward runs in — the rollout engine's prefill and decode steps, the learner's scoring, SFT, the
critic — `torch.autocast(<the model's device type>, bfloat16)` when set, else nothing. Autocast
covers forwards only: backward and the optimizer step run outside it, on weights kept in
`model.dtype`. bf16 autocast works on CPU too, which is how it is tested here.
"""

from __future__ import annotations

import contextlib

import torch

from tracerl.models.device import model_device

_ATTR = "_tracerl_autocast"
DTYPES = {"bf16": torch.bfloat16}


def set_autocast(model, mode: str | None):
    object.__setattr__(model, _ATTR, DTYPES[mode] if mode else None)
    return model


def autocast_dtype(model) -> torch.dtype | None:
    return model.__dict__.get(_ATTR) if hasattr(model, "__dict__") else None


def forward_context(model):
    """`torch.autocast` for `model`'s device when its autocast is set, else a no-op context."""
    dtype = autocast_dtype(model)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=model_device(model).type, dtype=dtype)


def last_logits(model, width: int):
    """`logits_to_keep` for a forward of `width` columns that needs only the last column's logits.

    An int makes Hugging Face's head run on `hidden[:, -1:, :]`, a strided view; for a bfloat16 matmul (bf16
    weights, or bf16 autocast) torch then takes its batched path and copies the whole `[V, H]` head once per row
    (SmolLM2: 4 rows, 0.6 s for one prefill against 8 ms). An index tensor makes the slice a contiguous copy of
    the few hidden rows instead. fp32 keeps the int: there torch's two paths differ in the last bits, and a float32
    run stays bit for bit the run it was (the view costs ~15 ms a prefill there)."""
    if autocast_dtype(model) is None and next(model.parameters()).dtype == torch.float32:
        return 1
    return torch.tensor([width - 1], device=model_device(model))


_ROLLOUT_ATTN = "_tracerl_rollout_attention"


def set_learner_attention(model, mode: str) -> str | None:
    """`model.attention` for a learner-side model (policy, critic, reference): `sdpa` / `eager` as named; `auto`
    picks `eager` where the model computes in bfloat16 on a CPU (torch's CPU flash-attention kernel in bf16 is
    slower than the plain matmuls: forward + backward of one SmolLM2 layer at 16 x 34 x 60, 28 ms vs 7.5 ms) and
    leaves the architecture's choice elsewhere. The implementation the model had before is remembered, and the
    rollout copies of its weights (`models/weights.py plain_architecture`) are built with that one: eager decode
    in bf16 is slower than sdpa. Returns the implementation now set (None: unchanged)."""
    cur = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if mode == "auto":
        bf16 = autocast_dtype(model) == torch.bfloat16 or next(model.parameters()).dtype == torch.bfloat16
        mode = "eager" if bf16 and model_device(model).type == "cpu" else cur
    if cur is None or mode == cur or not hasattr(model, "set_attn_implementation"):
        return None
    model.__dict__.setdefault(_ROLLOUT_ATTN, cur)
    model.set_attn_implementation(mode)
    return mode


def rollout_attention(model) -> str | None:
    """The attention implementation a rollout copy of `model` uses: what it had before `set_learner_attention`."""
    return model.__dict__.get(_ROLLOUT_ATTN) if hasattr(model, "__dict__") else None


def enable_gradient_checkpointing(model) -> None:
    """Hugging Face activation checkpointing, non-reentrant (works when the inputs need no gradient,
    as with LoRA's frozen embeddings). Only in train mode: the engine's eval-mode forwards keep their cache."""
    ckpt = {"use_reentrant": False}
    if not getattr(model, "supports_gradient_checkpointing", False):
        from tracerl.errors import UserError

        raise UserError(f"{type(model).__name__} does not support gradient checkpointing; "
                        "set model.gradient_checkpointing=false")
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x names it so
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=ckpt)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt)


def checkpointing_enabled(model) -> bool:
    fn = getattr(model, "is_activation_checkpointing", None)
    if fn is None:
        return bool(getattr(model, "is_gradient_checkpointing", False))
    return bool(fn() if callable(fn) else fn)

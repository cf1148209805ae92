"""The policy's weights as a plain model: what every holder of its own copy of the policy loads.

Rollout worker processes, Ray rollout actors, the HF `generate` engine on a copy and vLLM hold their
own copy of the policy's weights. They hold the *plain* architecture (`plain_architecture`: the
Hugging Face class and config), and load `plain_state_dict(model)` at each sync:

- a plain model: its own state_dict;
- a LoRA policy (peft injected in place, `models/lora.py`): the base weights with every adapter
  merged in, W + (alpha/r)·B·A (`lora.merged_weights`, peft's own delta), under the plain base
  architecture's keys (`...q_proj.base_layer.weight` is `...q_proj.weight`; adapter tensors dropped).
  Computed from the tensors at each call: the learner's model is never copied or merged in place.

So the copy samples exactly the policy the learner scores, LoRA or not. Autocast travels beside the
weights (the copy's `forward_context`, `models/precision.py`).
"""

from __future__ import annotations

import copy

import torch

from tracerl.models import lora


def plain_architecture(model) -> tuple[type, object]:
    """(class, config) of the plain module the policy's weights load into (a LoRA policy's base class), with the
    attention implementation for sampling (`models/precision.py rollout_attention`)."""
    from tracerl.models.precision import rollout_attention

    config, attn = model.config, rollout_attention(model)
    if attn is not None and getattr(config, "_attn_implementation", None) != attn:
        config = copy.deepcopy(config)
        config._attn_implementation = attn
    return type(model), config


def plain_state_dict(model, *, clone: bool = False) -> dict[str, torch.Tensor]:
    """The policy's weights under the plain architecture's keys (LoRA merged in); detached, and cloned
    when `clone` (merged tensors are new tensors either way)."""
    merged = lora.merged_weights(model) if lora.is_lora(model) else {}
    out = {}
    for key, value in model.state_dict().items():
        parts = key.split(".")
        if merged and any(p.startswith("lora_") for p in parts):
            continue  # the adapter's own tensors: folded into the base weights below
        plain = ".".join(p for p in parts if p != "base_layer") if merged else key
        if plain in merged:
            out[plain] = merged[plain]
        else:
            out[plain] = value.detach().clone() if clone else value.detach()
    return out


def param_dtype(model) -> str:
    """`model`'s parameter dtype by name ("float32", "bfloat16", ...), as configs and worker settings take it."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def engine_copy(model, dtype: str | torch.dtype | None = None, device=None):
    """A rollout engine's own copy of the policy `model`: `plain_copy` in `dtype`, under the model's autocast."""
    from tracerl.models.precision import DTYPES, autocast_dtype, set_autocast

    mode = autocast_dtype(model)
    return set_autocast(plain_copy(model, dtype=dtype, device=device), next((k for k, v in DTYPES.items() if v == mode), None))


def plain_copy(model, *, dtype: str | torch.dtype | None = None, device=None):
    """A new plain module holding `plain_state_dict(model)` (eval mode, no gradients), in `dtype` on `device`
    (default: the model's). Built without drawing from torch's global generator, so the run's RNG is untouched."""
    cls, config = plain_architecture(model)
    first = next(model.parameters())
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    with torch.random.fork_rng(devices=[]):
        twin = cls(config)
    twin = twin.to(device=device or first.device, dtype=dtype or first.dtype)
    twin.load_state_dict(plain_state_dict(model))
    if getattr(model, "generation_config", None) is not None and hasattr(twin, "generation_config"):
        twin.generation_config = model.generation_config
    twin.eval()
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin

"""LoRA adapters through peft (`model.lora`; docs/training.md, "Devices, precision and LoRA").

The adapter is injected into the policy module in place (`peft.get_peft_model`), so the engine, the
learner and evaluation keep holding the same `model` object and see the adapted weights; the
`PeftModel` wrapper is kept on the model (`peft_of`) for what only it does:
- the KL reference is the same model with the adapter switched off (`AdapterDisabled`, scored under
  `with peft_model.disable_adapter():`), so no second copy of the weights exists;
- a checkpoint holds only the adapter (`adapter_model.safetensors`, `adapter_config.json`) and
  `lora_base.json`, a pointer to the base weights it applies to: the `model.path` the run loaded, or,
  for the tiny model, `<run>/lora_base/` — the SFT-trained weights the adapter was attached to;
- `merged_weights` computes each adapted layer's merged weight W + (alpha/r)·B·A (peft's own
  `get_delta_weight`, without touching the module); `models/weights.py` turns them into the plain
  model's state_dict that rollout workers, Ray actors and engines with their own copy load at every
  sync, and `models/weights.py` `plain_copy` into a plain Hugging Face module (`tracerl merge`).

Only adapter parameters require gradients; the optimizer (`train/optim.py`) holds only those.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import torch

from tracerl.errors import UserError

_ATTR = "_tracerl_peft"
POINTER = "lora_base.json"
ADAPTER_CONFIG = "adapter_config.json"


def require_peft():
    try:
        import peft
    except ImportError:
        raise UserError("model.lora needs the peft package, which is not installed; "
                        "pip install 'tracerl[lora]' (or set model.lora=null)") from None
    return peft


def linear_module_names(model) -> set[str]:
    """Last name parts of the linear layers LoRA can adapt (the output layer excluded)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
            if isinstance(mod, torch.nn.Linear) and mod is not head and name}


def check_targets(cfg, model) -> None:
    """One sentence (UserError) when `cfg.target_modules` names no linear layer of `model`."""
    names = linear_module_names(model)
    if not names:
        raise UserError(f"model.lora: {type(model).__name__} has no linear layers peft can adapt; "
                        "set model.lora=null to fine-tune every weight")
    if cfg.target_modules == "all-linear":
        return
    unknown = sorted(set(cfg.target_modules) - names)
    if unknown:
        raise UserError(f"model.lora.target_modules names {', '.join(map(repr, unknown))}, which "
                        f"{type(model).__name__} lacks; its linear layers are {', '.join(sorted(names))}")


def peft_config(cfg):
    peft = require_peft()
    targets = cfg.target_modules if cfg.target_modules == "all-linear" else list(cfg.target_modules)
    return peft.LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets,
                           task_type="CAUSAL_LM")


def peft_of(model):
    """The PeftModel wrapping `model`, or None when it has no adapter."""
    return model.__dict__.get(_ATTR) if hasattr(model, "__dict__") else None


def is_lora(model) -> bool:
    return peft_of(model) is not None


def _remember(model, peft_model, pointer: dict) -> None:
    object.__setattr__(model, _ATTR, peft_model)  # not a submodule: parameters() must not see it twice
    object.__setattr__(model, "_tracerl_lora_base", dict(pointer))


def attach_lora(model, cfg, *, pointer: dict):
    """Inject adapters into `model` in place (its weights frozen) and return it.

    `pointer` says where the base weights live: {"path": ..., "gguf_file": ..., "dtype": ...}, a path
    relative to a checkpoint's parent folder when `relative` is true."""
    peft = require_peft()
    check_targets(cfg, model)
    try:
        with warnings.catch_warnings():  # peft asks transformers a deprecated question (is_gradient_checkpointing)
            warnings.simplefilter("ignore", FutureWarning)
            wrapped = peft.get_peft_model(model, peft_config(cfg))
    except (ValueError, TypeError, NotImplementedError) as err:
        raise UserError(f"model.lora: peft cannot wrap {type(model).__name__} ({str(err)[:160]}); "
                        "set model.lora=null to fine-tune every weight") from None
    _remember(model, wrapped, pointer)
    return model


class AdapterDisabled:
    """The KL reference under LoRA: the policy's own module scored with its adapter off (no weight copy)."""

    def __init__(self, model):
        self.model = model

    def context(self):
        return peft_of(self.model).disable_adapter()


def reference_view(ref):
    """(module to score, context to score it in) for a reference role: a frozen copy, or `AdapterDisabled`."""
    import contextlib

    if isinstance(ref, AdapterDisabled):
        return ref.model, ref.context()
    return ref, contextlib.nullcontext()


def trainable_state(model) -> dict[str, torch.Tensor]:
    """The adapter's tensors (peft's names), as saved in a checkpoint."""
    peft = require_peft()
    return peft.get_peft_model_state_dict(peft_of(model))


def save_adapter(model, out: Path) -> None:
    """Write the adapter, its config and the base pointer into `out` (a checkpoint being written)."""
    wrapped = peft_of(model)
    wrapped.save_pretrained(out, safe_serialization=True)
    (out / POINTER).write_text(json.dumps(model.__dict__["_tracerl_lora_base"], indent=1, sort_keys=True))


def is_adapter_dir(path: Path) -> bool:
    path = Path(path)
    return (path / ADAPTER_CONFIG).is_file() and (path / POINTER).is_file() and not (path / "config.json").is_file()


def base_location(ckpt: Path) -> tuple[Path | str, dict]:
    """Where the base weights of adapter checkpoint `ckpt` are, and the pointer itself."""
    try:
        pointer = json.loads((Path(ckpt) / POINTER).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{ckpt / POINTER} is unreadable ({type(exc).__name__}); restore it from the run") from None
    path = pointer.get("path")
    if not isinstance(path, str):
        raise UserError(f"{ckpt / POINTER} names no base model path; restore it from the run")
    if pointer.get("relative"):
        return (Path(ckpt).parent / path).resolve(), pointer
    return path, pointer


def save_base(model, tokenizer, out: Path) -> None:
    """The weights an adapter is attached to, as a plain HF model (the tiny model after SFT)."""
    out = Path(out)
    if out.exists():  # written once per run, when the adapter is attached
        return
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    os.replace(tmp, out)


def merged_weights(model) -> dict[str, torch.Tensor]:
    """{plain module name + ".weight": W + sum of the active adapters' (alpha/r)·B·A} for every adapted layer of
    `model`, in W's dtype and device, computed from the tensors (the module is left as it is: no copy, no merge).
    A layer whose adapter is switched off or already merged (peft's `merged`) gives W itself."""
    from peft.tuners.lora import LoraLayer

    out = {}
    with torch.no_grad():
        for name, mod in model.named_modules():
            if not isinstance(mod, LoraLayer):
                continue
            base = mod.get_base_layer()
            w = base.weight.detach()
            if not (mod.merged or mod.disable_adapters):
                for adapter in mod.active_adapters:
                    if adapter not in mod.lora_A:
                        continue
                    if getattr(mod, "use_dora", {}).get(adapter) or getattr(mod, "lora_bias", {}).get(adapter):
                        raise ValueError(f"{name}: merging a DoRA / lora_bias adapter is not supported")
                    w = w + mod.get_delta_weight(adapter).to(w.dtype)
            out[f"{name}.weight"] = w
    return out

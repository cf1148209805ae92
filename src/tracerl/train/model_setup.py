"""Put a run's models where the recipe says and train them the way it says (docs/training.md,
"Devices, precision and LoRA"): devices, dtype, bf16 autocast, gradient checkpointing, LoRA.

The pipeline calls four things here:
- `check_model_setup(recipe)` before anything is written: every device resolves on this machine,
  peft imports when `model.lora` is set, and the LoRA targets exist (for the tiny model on a
  parameter-free copy built on the meta device); each problem is one sentence (exit 2);
- `place_policy(model, recipe)` once the policy is loaded or built (and `attach_lora_if_due` at
  load for `model.path`);
- `attach_lora_if_due(...)` before each stage: the tiny model gets its adapter at the first stage
  that is not SFT of the freshly built weights, after `lora_base/` (those weights) is saved;
- `new_reference(model, recipe)` when an RL stage needs a KL reference: the policy with its adapter
  disabled under LoRA (no copy), else a frozen deep copy on `model.reference_device`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from tracerl.models import lora
from tracerl.models.device import resolve_device, role_devices
from tracerl.models.precision import enable_gradient_checkpointing, set_autocast, set_learner_attention

LORA_BASE = "lora_base"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def check_model_setup(recipe) -> None:
    """Refuse (UserError) what cannot run here, before the run directory exists."""
    role_devices(recipe)
    cfg = recipe.model.lora
    if cfg is None:
        return
    lora.require_peft()
    if recipe.model.path is None:  # the tiny Llama: its module names without building its weights
        from tracerl.models.tiny import build_model

        t = recipe.model.tiny
        with torch.device("meta"):
            meta = build_model(t.vocab_size, hidden_size=t.hidden_size, num_layers=t.num_layers,
                               num_heads=t.num_heads, intermediate_size=t.intermediate_size,
                               max_positions=t.max_positions, seed=0, pad_token_id=0, eos_token_id=1)
        lora.check_targets(cfg, meta)


def place_role(model, recipe, device: str | None, *, what: str):
    """`model` on `device` (null: model.device), in `model.dtype`, with the recipe's autocast."""
    dev = resolve_device(device, default=recipe.model.device, what=what if device is not None else "model.device")
    model.to(device=dev, dtype=_DTYPES[recipe.model.dtype])
    set_autocast(model, recipe.model.autocast)
    set_learner_attention(model, recipe.model.attention)  # model.attention
    return model


def place_policy(model, recipe):
    """The policy on model.device, with autocast and gradient checkpointing as the recipe says."""
    place_role(model, recipe, None, what="model.device")
    if recipe.model.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model


def _pointer(recipe) -> dict:
    """Where the base weights of a `model.path` run live (a `pkg:` name stays portable)."""
    from tracerl.models.load import resolve_model_path

    path = recipe.model.path
    if not path.startswith("pkg:"):
        path = str(Path(resolve_model_path(path)).resolve())
    return {"path": path, "gguf_file": recipe.model.gguf_file, "dtype": recipe.model.dtype, "relative": False}


def attach_lora_if_due(model, tokenizer, recipe, *, stage: str, run_path: Path | None = None) -> bool:
    """Attach the adapter when it is due and not there yet; True when this call attached it.

    Due at load (`stage="load"`) for a `model.path` run; for the tiny model at the first stage that
    is not SFT (its SFT trains the fresh weights fully; the adapter then applies to them)."""
    cfg = recipe.model.lora
    if cfg is None or lora.is_lora(model):
        return False
    if recipe.model.path is not None:
        pointer = _pointer(recipe)
    elif stage in ("load", "sft"):
        return False
    else:
        base = Path(run_path) / LORA_BASE
        lora.save_base(model, tokenizer, base)
        # relative to a checkpoint's parent folder (runs/<run>/checkpoints/): the run can move
        pointer = {"path": f"../{LORA_BASE}", "gguf_file": None, "dtype": recipe.model.dtype, "relative": True}
    lora.attach_lora(model, cfg, pointer=pointer)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in model.parameters())
    print(f"LoRA r={cfg.r} attached ({n_train / 1e6:.3f}M of {n_all / 1e6:.2f}M parameters train)", flush=True)
    return True


def new_reference(model, recipe):
    """The KL reference at an RL stage start: the adapter-disabled policy under LoRA, else a frozen copy."""
    if lora.is_lora(model):
        return lora.AdapterDisabled(model)
    from tracerl.train.checkpoint import freeze

    ref = freeze(copy.deepcopy(model))
    if recipe.model.reference_device is not None:
        place_role(ref, recipe, recipe.model.reference_device, what="model.reference_device")
    return ref

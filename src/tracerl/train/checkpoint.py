"""Checkpoints: the model and tokenizer in Hugging Face format plus `trainer_state.pt`."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

REFERENCE_FILE = "reference.safetensors"


def save_checkpoint(path: Path, model, tokenizer, *, state: dict[str, Any], reference=None) -> Path:
    """Write `path/` loadable by AutoModelForCausalLM / AutoTokenizer, and the trainer state.

    `reference` (the frozen KL reference policy, when there is one) is saved beside the weights.
    """
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    if reference is not None:
        save_model(reference, str(path / REFERENCE_FILE))
    tokenizer.save_pretrained(path)
    full = dict(state)
    full["torch_rng"] = torch.get_rng_state()
    full["python_rng"] = random.getstate()
    torch.save(full, path / "trainer_state.pt")
    return path


def load_trainer_state(path: Path) -> dict[str, Any]:
    return torch.load(path / "trainer_state.pt", weights_only=False)


def load_reference(path: Path, model):
    """The KL reference saved in checkpoint `path`, as a frozen copy of `model`; None if none was saved."""
    import copy

    file = path / REFERENCE_FILE
    if not file.exists():
        return None
    ref = copy.deepcopy(model)
    load_model(ref, str(file))
    return freeze(ref)


def freeze(model):
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model

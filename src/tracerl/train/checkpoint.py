"""Checkpoints: the model and tokenizer in Hugging Face format plus `trainer_state.pt`."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(path: Path, model, tokenizer, *, state: dict[str, Any]) -> Path:
    """Write `path/` loadable by AutoModelForCausalLM / AutoTokenizer, and the trainer state."""
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    full = dict(state)
    full["torch_rng"] = torch.get_rng_state()
    full["python_rng"] = random.getstate()
    torch.save(full, path / "trainer_state.pt")
    return path


def load_trainer_state(path: Path) -> dict[str, Any]:
    return torch.load(path / "trainer_state.pt", weights_only=False)

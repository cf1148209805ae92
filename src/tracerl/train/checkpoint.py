"""Checkpoints: the model and tokenizer in Hugging Face format (under LoRA: the adapter and a pointer
to its base weights) plus `trainer_state.pt`, written atomically and verifiable.

A checkpoint is written into a temporary directory beside its final place, every file is
fsynced, a `MANIFEST.json` listing every file with its size and SHA-256 is written last, and the
directory is renamed into place (then its parent fsynced). A kill at any moment leaves either
the previous state or a complete checkpoint; a half-written one is never named `step_N`, and
`verify_checkpoint` tells a complete one from anything else (a hand-made or damaged folder); it
lives in `store/checkpoints.py`, beside the run directory that picks the checkpoint to resume from.
The manifest also carries the store's marks at that moment (see `Store.marks`), so a resume
can roll the store back to exactly what it held when the checkpoint was taken.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from tracerl.models import lora
from tracerl.store.checkpoints import MANIFEST, file_sha256, verify_checkpoint  # noqa: F401  (re-exported)

REFERENCE_FILE = "reference.safetensors"
FORMAT = 1


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(path: Path, model, tokenizer, *, state: dict[str, Any], reference=None,
                    marks: dict[str, int] | None = None) -> Path:
    """Write `path/` loadable by AutoModelForCausalLM / AutoTokenizer, and the trainer state.

    `reference` (the frozen KL reference policy, when there is one) is saved beside the weights;
    `marks` (the store's row marks) go into the manifest. An existing `path` is replaced.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{path.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    if lora.is_lora(model):  # only the adapter, its config and a pointer to the base weights (models/lora.py)
        lora.save_adapter(model, tmp)
    else:
        model.save_pretrained(tmp, safe_serialization=True)
    if reference is not None and not isinstance(reference, lora.AdapterDisabled):  # LoRA's is the base: nothing to save
        save_model(reference, str(tmp / REFERENCE_FILE))
    tokenizer.save_pretrained(tmp)
    full = dict(state)
    full["torch_rng"] = torch.get_rng_state()
    full["python_rng"] = random.getstate()
    torch.save(full, tmp / "trainer_state.pt")
    files = {}
    for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
        _fsync(file)
        files[file.relative_to(tmp).as_posix()] = {"bytes": file.stat().st_size, "sha256": file_sha256(file)}
    manifest = {"format": FORMAT, "stage": state.get("stage"), "step": state.get("step"), "files": files,
                "store_marks": marks}
    with (tmp / MANIFEST).open("w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    _fsync(tmp)
    old = None
    if path.exists():  # the same step saved twice (a gate trip and the schedule): keep the newer
        old = path.parent / f".old-{path.name}-{os.getpid()}"
        os.rename(path, old)
    os.rename(tmp, path)
    _fsync(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path


def checkpoint_marks(path: Path) -> dict[str, int] | None:
    """The store marks recorded when checkpoint `path` was written (None for none)."""
    try:
        marks = json.loads((Path(path) / MANIFEST).read_text()).get("store_marks")
    except (OSError, ValueError, AttributeError):
        return None
    return marks if isinstance(marks, dict) else None


def load_trainer_state(path: Path) -> dict[str, Any]:
    return torch.load(path / "trainer_state.pt", weights_only=False)


def load_reference(path: Path, model):
    """The KL reference saved in checkpoint `path`, as a frozen copy of `model`; None if none was saved.
    Under LoRA the reference is `model` with its adapter disabled (nothing is saved for it)."""
    import copy

    if lora.is_lora(model):
        return lora.AdapterDisabled(model)
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

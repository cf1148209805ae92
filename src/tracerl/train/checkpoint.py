"""Checkpoints: the model and tokenizer in Hugging Face format (under LoRA: the adapter and a pointer
to its base weights) plus the trainer state (`trainer_state.json` + `trainer_state.safetensors`, train/state_file.py: JSON and raw
tensors, so loading a checkpoint never runs code), written atomically and verifiable. A sharded learner
(`learner.checkpoint_format: sharded`) adds `policy_shards/`: each rank's shard of the policy's weights and
AdamW moments as safetensors (train/shards.py), read back by any number of ranks.

A checkpoint is written into a temporary directory beside its final place, every file is
fsynced, a `MANIFEST.json` listing every file with its size and SHA-256 is written last, and the
directory is renamed into place (then its parent fsynced). A kill at any moment leaves either
the previous state or a complete checkpoint; a half-written one is never named `step_N`, and
`verify_checkpoint` tells a complete one from anything else (a hand-made or damaged folder); it
lives in `store/checkpoints.py`, beside the run directory that picks the checkpoint to resume from.
The manifest also carries the store's marks at that moment (see `Store.marks`), so a resume
can roll the store back to exactly what it held when the checkpoint was taken.

Every loader of a checkpoint goes through `load_trainer_state` and `load_checkpoint_model`: a folder with
a manifest is verified first (every path it names confined to the folder, every hash matching), and a
file that does not parse is one sentence (`UserError`), never a traceback. The pickled
`trainer_state.pt` of older checkpoints is refused, never unpickled.
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

from tracerl.errors import UserError
from tracerl.models import lora
from tracerl.store.checkpoints import MANIFEST, file_sha256, verify_checkpoint  # noqa: F401  (re-exported)
from tracerl.train.shards import SHARD_DIR
from tracerl.train.state_file import FORMAT, StateFileError, load_state, save_state

REFERENCE_FILE = "reference.safetensors"
PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(path: Path, model, tokenizer, *, state: dict[str, Any], reference=None,
                    marks: dict[str, int] | None = None, shards=None) -> Path:
    """Write `path/` loadable by AutoModelForCausalLM / AutoTokenizer, and the trainer state.

    `reference` (the frozen KL reference policy, when there is one) is saved beside the weights;
    `marks` (the store's row marks) go into the manifest. `shards(folder)`, a sharded learner's
    `write_shards`, has every rank write its shard of the policy into the folder before the manifest is
    taken, and returns what the manifest records as `policy_state` (`{"format": "full"}` without it).
    An existing `path` is replaced.
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
    save_state(tmp, {**state, **rng_states()})
    policy_state = (shards(tmp) if shards is not None else None) or {"format": "full"}
    files = {}
    for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
        _fsync(file)
        files[file.relative_to(tmp).as_posix()] = {"bytes": file.stat().st_size, "sha256": file_sha256(file)}
    manifest = {"format": FORMAT, "stage": state.get("stage"), "step": state.get("step"), "files": files,
                "store_marks": marks, "policy_state": policy_state}
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


def rng_states() -> dict[str, Any]:
    """The process's random streams, saved with every trainer state: torch, Python's `random`, NumPy's global."""
    import numpy as np

    return {"torch_rng": torch.get_rng_state(), "python_rng": random.getstate(), "numpy_rng": np.random.get_state()}


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the random streams `rng_states` saved (those a state holds; older states lack NumPy's)."""
    import numpy as np

    torch.set_rng_state(state["torch_rng"])
    if state.get("python_rng") is not None:
        random.setstate(state["python_rng"])
    if state.get("numpy_rng") is not None:
        np.random.set_state(state["numpy_rng"])


def load_trainer_state(path: Path) -> dict[str, Any]:
    """The trainer state of checkpoint `path`, read as JSON and safetensors (never unpickled); a folder whose
    manifest does not verify, or whose state files do not parse, is one sentence (UserError)."""
    path = Path(path)
    why = verify_checkpoint(path) if (path / MANIFEST).exists() else ""
    if why:
        raise UserError(f"checkpoint {path} is refused: {why}")
    try:
        state = load_state(path)
    except StateFileError as exc:
        raise UserError(f"checkpoint {path} has an unusable trainer state: {exc}; pick another checkpoint") from None
    policy = (state.get("roles_state") or {}).get("policy")
    if isinstance(policy, dict) and isinstance(policy.get("sharded"), dict):  # learner.checkpoint_format: sharded
        shards = path / SHARD_DIR  # the fixed name, never a path read from the file
        if not shards.is_dir():
            raise UserError(f"checkpoint {path} was written by a sharded learner but has no {SHARD_DIR}/ folder; "
                            "restore it or resume from another checkpoint")
        policy["sharded"]["path"] = str(shards)
    return state


def load_checkpoint_model(path, *, dtype: str = "float32", key: str = "model.path"):
    """(model, tokenizer) from a checkpoint or any Hugging Face model folder, for eval, --resume and serve. A
    folder with a MANIFEST.json is verified first (confined paths, sizes, SHA-256) and may hold no pickle-format
    file (tracerl writes safetensors only); elsewhere transformers and peft read `.bin` weights with
    `weights_only=True`. Whatever fails to parse is one sentence naming the folder, never a traceback."""
    from tracerl.models import load_model_and_tokenizer
    from tracerl.models.load import resolve_model_path

    folder = resolve_model_path(path, key=key)
    if (folder / MANIFEST).exists():
        why = verify_checkpoint(folder)
        pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickled and not why:
            why = f"it holds {pickled[0]}, a pickle-format file tracerl never writes (refused: unpickling can run code)"
        if why:
            raise UserError(f"checkpoint {folder} is refused: {why}")
    try:
        return load_model_and_tokenizer(folder, dtype=dtype, key=key)
    except UserError:
        raise
    except Exception as exc:  # transformers, tokenizers and safetensors raise many unrelated types on bad files
        raise UserError(f"could not load the model in {folder} ({type(exc).__name__}: {str(exc)[:160]}); "
                        f"the folder is damaged or not a model tracerl can load, so restore it or set {key} to another one") from None


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
    try:
        load_model(ref, str(file))
    except Exception as exc:  # a bad header, a short file, missing or misshapen tensors
        raise UserError(f"{file} is not the KL reference of this model ({type(exc).__name__}); "
                        "restore the checkpoint or resume from another one") from None
    return freeze(ref)


def freeze(model):
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model

"""Devices: resolve a recipe's device string, find a model's, move a batch there and back.

Every model role lives on one device (`model.device`, `model.reference_device`, `roles.*.device`).
A role's forward moves what it is given to its model's device and returns its answer on the device
the caller's tensors were on, so roles on different devices compose without the trainer knowing.
"""

from __future__ import annotations

import contextlib

import dataclasses

import torch

from tracerl.errors import UserError


def cuda_available() -> bool:
    return torch.cuda.is_available()


def resolve_device(spec: str | None, *, default: str = "auto", what: str = "model.device") -> torch.device:
    """`auto` → cuda when torch sees a CUDA device, else cpu; `cpu`, `cuda`, `cuda:N` as written.

    A CUDA device this machine lacks is a `UserError` naming the key and the fix.
    """
    spec = default if spec is None else spec
    if spec == "auto":
        return torch.device("cuda" if cuda_available() else "cpu")
    dev = torch.device(spec)
    if dev.type == "cuda":
        if not cuda_available():
            raise UserError(f"{what} is {spec!r} but torch sees no CUDA device here (torch.cuda.is_available() is "
                            f"False); set {what}=cpu or {what}=auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"{what} is {spec!r} but this machine has {torch.cuda.device_count()} CUDA device(s); "
                            f"use cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return dev


@contextlib.contextmanager
def intra_op_threads(threads: int | None):
    """torch's intra-op thread count set to `threads` inside the block (None: left as it is), restored after."""
    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def configure_torch(threads: int, *, deterministic: bool, device: torch.device) -> None:
    """The process's intra-op threads, and torch's deterministic algorithms when `deterministic` and the
    policy is on the CPU (`run.deterministic`: the same seed gives the same weights at any thread count)."""
    torch.set_num_threads(threads)
    set_deterministic(deterministic and device.type == "cpu")


def set_deterministic(on: bool) -> None:
    """torch's deterministic algorithms on or off, without their debugging fill: by default they also write NaN
    into every tensor `torch.empty` hands out (`fill_uninitialized_memory`), a guard against kernels that read
    memory they never wrote. No kernel does that, so the fill changes no result; it is one more write of every
    activation and gradient buffer (on SmolLM2 ~10 % of the learner's op time and of a decode step)."""
    torch.use_deterministic_algorithms(on, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False


def model_device(model) -> torch.device:
    """The device of the model's first parameter (cpu for a model without parameters)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def batch_to(batch, device: torch.device):
    """A copy of a dataclass of tensors (a `Batch`) with every tensor on `device`; itself when already there."""
    fields = dataclasses.fields(batch)
    if all(not isinstance(getattr(batch, f.name), torch.Tensor) or getattr(batch, f.name).device == device
           for f in fields):
        return batch
    return dataclasses.replace(batch, **{f.name: getattr(batch, f.name).to(device) for f in fields
                                         if isinstance(getattr(batch, f.name), torch.Tensor)})


def role_devices(recipe) -> dict[str, torch.device]:
    """Every device the recipe names, resolved (and checked) before anything is written."""
    m, roles = recipe.model, recipe.roles
    out = {"model.device": resolve_device(m.device)}
    policy = m.device
    named = {"model.reference_device": m.reference_device}
    for key in ("critic", "prm", "grader"):
        cfg = getattr(roles, key)
        if cfg is not None:
            named[f"roles.{key}.device"] = cfg.device
    for i, t in enumerate(roles.teachers):
        named[f"roles.teachers.{i}.device"] = t.device
    for key, spec in named.items():
        out[key] = resolve_device(spec, default=policy, what=key if spec is not None else "model.device")
    return out

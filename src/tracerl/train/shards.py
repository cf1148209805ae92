"""Sharded checkpoints of the policy (`learner.checkpoint_format: sharded`): every learner rank writes its own
shard of the policy's weights and AdamW moments with `torch.distributed.checkpoint` (DCP), as safetensors
(DCP's `HuggingFaceStorageWriter`, each rank one file `shard-0000<rank+1>-model-00001-of-00001.safetensors`
under the checkpoint's `policy_shards/`, each tensor's offset in the file's own safetensors metadata).

Nothing is gathered to rank 0 for the training state, and nothing in the folder is a pickle: the reader
(`HuggingFaceStorageReader`) builds DCP's plan from the safetensors headers, so a checkpoint still loads
without running code (train/checkpoint.py). Only tensors go there; the optimizer's hyper-parameters
(`param_groups`: lr, betas, …) and the schedule are a few numbers, kept in the JSON trainer state.

A load reshards: DCP reads each rank's slice of every tensor from whichever files hold it, so a checkpoint
of N ranks resumes under M ranks (FSDP2 DTensors) or in one process (plain tensors, `PolicyRole`).

Keys are the unwrapped model's names: `model/<name>` for a weight, `optim/<name>/<exp_avg|exp_avg_sq|step>`
for an AdamW moment, whatever wrapper (`prefix`) the module trains under.
"""

from __future__ import annotations

import torch

SHARD_DIR = "policy_shards"


def _flat():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def _tensors(module, optimizer, prefix: str) -> tuple[dict, dict, dict[str, torch.Tensor]]:
    """(model state dict, flattened optimizer state dict, the tensors under their checkpoint keys) — the
    tensors are the live ones (DTensor shards under FSDP2), so a DCP load fills them in place."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(module, optimizer, options=_flat())  # initialises an optimizer that never stepped
    out, seen = {}, set()
    for k, v in msd.items():  # a tied weight (embeddings = output layer) once, under its first name
        local = v.to_local() if hasattr(v, "to_local") else v
        if local.numel() and (local.data_ptr(), tuple(local.shape)) in seen:
            continue
        seen.add((local.data_ptr(), tuple(local.shape)))
        out[f"model/{k.removeprefix(prefix)}"] = v
    for k, v in osd.items():
        if k.startswith("state.") and isinstance(v, torch.Tensor):
            fqn, field = k.removeprefix("state.").rsplit(".", 1)
            out[f"optim/{fqn.removeprefix(prefix)}/{field}"] = v
    return msd, osd, out


def save_shards(module, optimizer, path: str, *, prefix: str = "") -> None:
    """Write this rank's shard of `module`'s weights and `optimizer`'s moments to `path` (every rank calls it)."""
    import torch.distributed.checkpoint as dcp

    _, _, tensors = _tensors(module, optimizer, prefix)
    dcp.save(tensors, storage_writer=dcp.HuggingFaceStorageWriter(path, save_distributed=True))


def load_shards(module, optimizer, path: str, *, prefix: str = "", sharded: bool = True) -> None:
    """Fill `module`'s weights and `optimizer`'s moments from the shards in `path`, resharded to this rank's
    slices (every rank calls it); `sharded` False: a plain module in one process, the whole tensors, no
    collective even where a process group exists."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    msd, osd, tensors = _tensors(module, optimizer, prefix)
    dcp.load(tensors, storage_reader=dcp.HuggingFaceStorageReader(path), no_dist=not sharded)
    set_state_dict(module, optimizer, model_state_dict=msd, optim_state_dict=osd, options=_flat())


def hyper_params(optimizer) -> list[dict]:
    """The optimizer's per-group settings (lr, betas, weight decay, …) without the parameters: plain numbers."""
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


_KERNEL = ("fused", "foreach")  # how the step is computed: the recipe's `learner.optimizer`, never the checkpoint's


def restore_hyper_params(optimizer, groups: list[dict]) -> None:
    for group, saved in zip(optimizer.param_groups, groups, strict=True):
        group.update({k: tuple(v) if isinstance(group.get(k), tuple) else v for k, v in saved.items()
                      if k not in _KERNEL})

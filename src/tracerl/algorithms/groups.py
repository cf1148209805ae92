"""Group bookkeeping shared by the group-relative estimators: ids to dense indices, segment statistics.

`group_ids_B` may be a tensor of ints or any sequence of hashables (task ids, uuids); both map to a
dense index `0..G-1` in order of first appearance, so results never depend on how ids are spelled.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def group_index(group_ids_B: torch.Tensor | Sequence[Hashable], device: torch.device | None = None) -> tuple[torch.Tensor, int]:
    """Dense group index per element (long tensor, first-appearance order) and the number of groups."""
    if isinstance(group_ids_B, torch.Tensor):
        if group_ids_B.dim() != 1:
            raise ValueError(f"group_ids_B must be one-dimensional, got shape {tuple(group_ids_B.shape)}")
        keys: Sequence[Hashable] = group_ids_B.tolist()
    else:
        keys = list(group_ids_B)
    seen: dict[Hashable, int] = {}
    idx = [seen.setdefault(k, len(seen)) for k in keys]
    return torch.tensor(idx, dtype=torch.long, device=device), len(seen)


def segment_sum(values: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, idx, values)


def segment_count(idx: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(n, dtype=dtype, device=idx.device).index_add(0, idx, torch.ones_like(idx, dtype=dtype))


def segment_mean(values: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    return segment_sum(values, idx, n) / segment_count(idx, n, values.dtype).clamp_min(1)


def segment_all_equal(values: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    """True for groups whose values are all exactly equal (they carry no relative signal)."""
    hi = torch.full((n,), float("-inf"), dtype=values.dtype, device=values.device).scatter_reduce(0, idx, values, "amax")
    lo = torch.full((n,), float("inf"), dtype=values.dtype, device=values.device).scatter_reduce(0, idx, values, "amin")
    return hi == lo


def relative(values: torch.Tensor, idx: torch.Tensor, n: int, *, scale: str = "std", eps: float = 1e-6) -> torch.Tensor:
    """(x − group mean) / (group population std + eps), or only centred when `scale="none"`.

    Members of an all-equal group get exactly 0 (not a rounding residue divided by eps).
    """
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    mean = segment_mean(values, idx, n)
    centred = values - mean[idx]
    if scale == "std":
        std = segment_mean(centred * centred, idx, n).sqrt()
        centred = centred / (std[idx] + eps)
    flat = segment_all_equal(values, idx, n)[idx]
    return torch.where(flat, torch.zeros_like(centred), centred)


def as_float(x: torch.Tensor | Sequence[float]) -> torch.Tensor:
    t = torch.as_tensor(x)
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())

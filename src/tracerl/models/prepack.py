"""Linear layers on weights pre-packed for the CPU's matmul library (`engine.prepack`, docs/engines.md).

Decoding runs every linear layer on a few rows (M = the rows still sampling) against the whole weight. On a
CPU, torch hands such a product to MKL (float32) or oneDNN (bfloat16) as a plain row-major matrix, and the
library re-blocks the weight for its kernel on every call. `prepack` turns a model's `nn.Linear` layers into
`PackedLinear`s that keep a copy of the weight in the library's own blocked layout (MKL `sgemm_pack`, oneDNN's
reorder) and multiply against that: measured on SmolLM2-135M, one thread, a decode step at 8 rows went from
137 to 83 ms of matmul (float32), at 32 rows from 142 to 125 ms (docs/performance_smollm2.md).

The packed copy is rebuilt whenever the weight changes (a weight sync writes it in place, which bumps the
tensor's version counter, or replaces it) and `drop_packs` frees it (an engine asleep through the update).
A layer falls back to `F.linear` where the packed kernels do not apply: gradients needed, autocast to
another dtype than the weight's, a device other than the CPU, a dtype other than float32 / bfloat16, or bfloat16
on a CPU without oneDNN's bfloat16 kernels (`bf16_packs_available`).
The product is the same up to float rounding (bit for bit at ≥ 16 rows in float32; MKL's few-row kernel
differs in the last bits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# The row count the weights are packed for. MKL picks its blocking from it; measured at SmolLM2's shapes, one
# thread (float32 matmuls of a decode step, ms, packed / plain): packed for 32 rows it is faster or even from 2 to
# 64 rows (2: 51 / 53, 8: 71 / 106, 16: 81 / 93, 32: 105 / 128, 64: 176 / 185); packed for 1 row it was slower at 16.
PACK_ROWS = 32


def bf16_packs_available() -> bool:
    """Whether oneDNN has bfloat16 matmul kernels on this CPU (AVX-512 BF16 / AVX-NE-CONVERT / AMX; an AVX2-only
    CPU has none, and there a bfloat16 `PackedLinear` runs `F.linear`)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check is not None and check())


def prepack_available() -> bool:
    """Whether this torch build has the packed-weight CPU kernels (MKL and oneDNN)."""
    return (torch.backends.mkl.is_available() and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkl, "_mkl_linear") and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


_PACKABLE = (torch.float32, torch.bfloat16) if bf16_packs_available() else (torch.float32,)


class PackedLinear(torch.nn.Linear):
    """An `nn.Linear` (same parameters, same state dict) that multiplies against a pre-packed weight."""

    _packed: torch.Tensor | None = None
    _packed_key: tuple | None = None

    def _pack(self) -> torch.Tensor:
        w = self.weight.detach()
        key = (w.data_ptr(), w._version, w.dtype)
        if self._packed_key != key:
            self._packed = None  # the old pack goes before the new one is made
            if w.dtype == torch.float32:
                self._packed = torch.ops.mkl._mkl_reorder_linear_weight(w, PACK_ROWS)
            else:
                self._packed = torch.ops.mkldnn._reorder_linear_weight(w, PACK_ROWS)
            self._packed_key = key
        return self._packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        b = self.bias
        if (w.device.type != "cpu" or w.dtype not in _PACKABLE or x.dtype != w.dtype
                or (b is not None and b.dtype != w.dtype)
                or (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad))
                or (torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") != w.dtype) or x.numel() == 0):
            return F.linear(x, w, b)
        packed = self._pack()
        flat = x.reshape(-1, x.shape[-1])
        if w.dtype == torch.float32:
            out = torch.ops.mkl._mkl_linear(flat, packed, w, b, flat.shape[0])
        else:
            out = torch.ops.mkldnn._linear_pointwise(flat, packed, b, "none", [], "")
        return out.view(*x.shape[:-1], out.shape[-1])


def prepack(model: torch.nn.Module) -> int:
    """Turn every `nn.Linear` of `model` into a `PackedLinear` in place (parameters untouched); returns how many."""
    n = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = PackedLinear
            n += 1
    return n


def drop_packs(model: torch.nn.Module) -> None:
    """Free every packed copy (rebuilt at the next forward)."""
    for module in model.modules():
        if isinstance(module, PackedLinear):
            module._packed = module._packed_key = None

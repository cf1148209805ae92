"""Linear layers on weights pre-packed for the CPU's matmul library (`engine.prepack`, docs/engines.md).

Decoding runs every linear layer on a few rows (M = the rows still sampling) against the whole weight. On a
CPU, torch hands such a product to MKL (float32) or oneDNN (bfloat16) as a plain row-major matrix, and the
library re-blocks the weight for its kernel on every call. `prepack` turns a model's `nn.Linear` layers into
`PackedLinear`s that keep a copy of the weight in the library's own blocked layout (MKL `sgemm_pack`, oneDNN's
reorder) and multiply against that: measured on SmolLM2-135M, one thread, a decode step at 8 rows went from
137 to 83 ms of matmul (float32, MKL, AVX-512 host), at 32 rows from 142 to 125 ms (docs/performance_smollm2.md).
Float32 weights go to MKL on a CPU with AVX-512 and to oneDNN elsewhere (`fp32_pack_kernel`): on an AVX2 host
(AMD EPYC) MKL's packs gained nothing over plain `F.linear` and oneDNN's took the 211 matmuls of a 16-row decode
step from 157 to 79 ms on two threads.

The packed copy is rebuilt whenever the weight changes (a weight sync writes it in place, which bumps the
tensor's version counter, or replaces it) and `drop_packs` frees it (an engine asleep through the update).
Where a layer's product reads its pack alone (oneDNN, fbgemm) and no other module shares its weight, the engine
keeps the pack alone (`release_packed_weights`) and a weight sync packs it straight from the incoming state
(`PackedLinear.pack_from`), so the copy costs the packs' bytes and no transient second copy.
In a Llama / Qwen2 block the projections that read the same input (q/k/v, gate/up) are multiplied as one stacked
pack (`PackGroup`, pack_groups.py).
A layer falls back to `F.linear` where the packed kernels do not apply: gradients needed, autocast to
another dtype than the weight's, a device other than the CPU, a dtype other than float32 / bfloat16, or bfloat16
on a CPU without oneDNN's bfloat16 kernels (`bf16_packs_available`).
The product is the same up to float rounding (MKL: bit for bit at ≥ 16 rows in float32, its few-row kernel
differs in the last bits; oneDNN: within ~1e-5 relative).

`prepack(model, half=True)` (`engine.prepack: float16`) packs float32 layers' weights in half precision instead, for
fbgemm's fp16-weight GEMM (x86 with AVX2 / F16C): float32 activations, the weights widened in registers, sums in
float32. Half the bytes read per product and a kernel made for few rows: on an AVX2 host without bfloat16 kernels,
SmolLM2's 211 matmuls of a decode step took 87 against 182 ms at 16 rows and 28 against 109 ms at 4 rows (one
thread). The weights are rounded to float16 (11 significant bits; bfloat16 keeps 8), so the policy it samples is
the learner's up to that rounding, which the engine probe measures.
"""

from __future__ import annotations

import threading
import warnings

import torch
import torch.nn.functional as F

from tracerl.models.pack_groups import ARCHITECTURES, SIBLINGS, PackGroup

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


def fp16_packs_available() -> bool:
    """Whether this torch has fbgemm's fp16-weight GEMM for this CPU (x86 with AVX2 and F16C; `prepack(half=True)`)."""
    if not all(hasattr(torch, f) for f in ("fbgemm_pack_gemm_matrix_fp16", "fbgemm_linear_fp16_weight")):
        return False
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in torch 2.13, not gone: this checks it still runs
            w = torch.ones(8, 4)
            out = torch.fbgemm_linear_fp16_weight(torch.ones(2, 4), torch.fbgemm_pack_gemm_matrix_fp16(w), torch.zeros(8))
    except RuntimeError:
        return False
    return bool(torch.equal(out, torch.full((2, 8), 4.0)))


_PACKABLE = (torch.float32, torch.bfloat16) if bf16_packs_available() else (torch.float32,)


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor string as Linux reports it ("GenuineIntel", "AuthenticAMD"), "" where it cannot be read."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def fp32_pack_kernel() -> str:
    """The library float32 weights are packed for: "mkl" (`sgemm_pack`) on an Intel CPU with AVX-512, "onednn" (its
    reorder, JIT kernels) on any other. MKL picks its kernels by vendor and model; measured on SmolLM2-135M's 211
    decode-step matmuls at 16 rows, two threads: AVX2 AMD EPYC plain `F.linear` 157 ms, MKL packs 148, oneDNN packs
    79; AVX-512 AMD EPYC 67 / 84 / 35 (one thread 99 / 96 / 58). MKL's packs were measured faster than plain on
    an AVX-512 Intel host (8 rows: 137 -> 83 ms) and are kept there."""
    avx512 = torch.backends.cpu.get_cpu_capability() == "AVX512"
    return "mkl" if avx512 and cpu_vendor() == "GenuineIntel" else "onednn"


_FP32_KERNEL = fp32_pack_kernel()


class PackedLinear(torch.nn.Linear):
    """An `nn.Linear` (same parameters, same state dict) that multiplies against a pre-packed weight."""

    _packed: torch.Tensor | None = None
    _packed_key: tuple | None = None
    _group: PackGroup | None = None  # siblings multiplied as one stacked pack (pack_groups.py)

    def _make_pack(self, w: torch.Tensor) -> torch.Tensor:
        """`w` (this layer's dtype and device) in its kernel's packed layout."""
        if w.dtype == torch.float32 and _FP32_KERNEL == "mkl":
            return torch.ops.mkl._mkl_reorder_linear_weight(w, PACK_ROWS)
        return torch.ops.mkldnn._reorder_linear_weight(w, PACK_ROWS)

    def _pack(self) -> torch.Tensor:
        if self._group is not None:
            return self._group.pack()
        w = self.weight.detach()
        key = (w.data_ptr(), w._version, w.dtype)
        if self._packed_key != key:
            self._packed = None  # the old pack goes before the new one is made
            self._packed = self._make_pack(w)
            self._packed_key = key
        return self._packed

    def packs_alone(self) -> bool:
        """Whether this layer's products would read its pack alone, so that its weight need not be kept: oneDNN's
        and fbgemm's kernels take the pack only, MKL's takes the weight too, a weight that cannot be packed (its
        dtype, its device) is multiplied plainly."""
        w, b = self.weight, self.bias
        return (w.device.type == "cpu" and w.dtype in _PACKABLE and (b is None or b.dtype == w.dtype)
                and not (w.dtype == torch.float32 and _FP32_KERNEL == "mkl"))

    def pack_from(self, weight: torch.Tensor) -> None:
        """Pack `weight` (a state dict's tensor, any dtype) as this layer's weight and keep the pack alone: what a
        weight sync does for a layer that `packs_alone` (no copy of the weight is made, `release_packed_weights`).
        A group's member hands its weight to the group, which packs the stack once all have come."""
        if self._group is not None:
            return self._group.pack_from(self, weight)
        self._packed = None
        self._packed = self._make_pack(weight.detach().to(device=self.weight.device, dtype=self.weight.dtype))
        self._packed_key = None
        if self.weight.numel():
            self.weight.data = torch.empty(0, dtype=self.weight.dtype, device=self.weight.device)

    @property
    def _released(self) -> bool:
        return self._packed is not None and self.weight.numel() == 0

    def _weight_packable(self) -> bool:
        """Whether this layer's weight (and bias) can be packed for its kernel."""
        w, b = self.weight, self.bias
        return (w.device.type == "cpu" and w.dtype in _PACKABLE and w.numel() > 0
                and (b is None or b.dtype == w.dtype))

    def _packs_for(self, x: torch.Tensor) -> bool:
        """Whether a product with `x` runs on the packed weight (else `F.linear`): no gradients wanted, no autocast
        to another dtype, `x` in the weight's dtype and not empty."""
        w = self.weight
        return (self._weight_packable() and x.dtype == w.dtype and x.numel() > 0
                and not (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad))
                and not (torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") != w.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._group is not None and (self._released or self._packs_for(x)):
            return self._group.product(self, x)
        w, b = self.weight, self.bias
        if self._released:  # the pack is all there is (release_packed_weights): any input goes through it
            flat = x.reshape(-1, x.shape[-1]).to(w.dtype)
            if not flat.is_contiguous():
                flat = flat.contiguous()
            out = torch.ops.mkldnn._linear_pointwise(flat, self._packed, b, "none", [], "")
            return out.view(*x.shape[:-1], out.shape[-1]).to(x.dtype)
        if not self._packs_for(x):
            return F.linear(x, w, b)
        packed = self._pack()
        flat = x.reshape(-1, x.shape[-1])
        if w.dtype == torch.float32 and _FP32_KERNEL == "mkl":
            out = torch.ops.mkl._mkl_linear(flat, packed, w, b, flat.shape[0])
        else:
            out = torch.ops.mkldnn._linear_pointwise(flat, packed, b, "none", [], "")
        return out.view(*x.shape[:-1], out.shape[-1])


_QUIET = threading.Lock()
_quieted: set[str] = set()


def _quiet_once(fn, *args):
    """`fn(*args)` with its first call's warnings silenced: fbgemm's fp16 entry points are deprecated in torch 2.13
    (not gone), and torch warns once per process; later calls (from any thread) run without touching the filters."""
    if fn.__name__ not in _quieted:
        with _QUIET:
            if fn.__name__ not in _quieted:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = fn(*args)
                _quieted.add(fn.__name__)
                return out
    return fn(*args)


class HalfPackedLinear(PackedLinear):
    """A `PackedLinear` whose float32 weight is packed in float16 for fbgemm (`prepack(model, half=True)`): float32
    activations times float16 weights, summed in float32. Falls back to `F.linear` where `PackedLinear` would, and
    for a weight or input that is not float32."""

    def _make_pack(self, w: torch.Tensor) -> torch.Tensor:
        self._zero_bias = torch.zeros(w.shape[0], dtype=torch.float32)
        return _quiet_once(torch.fbgemm_pack_gemm_matrix_fp16, w)

    def packs_alone(self) -> bool:
        w, b = self.weight, self.bias
        return w.device.type == "cpu" and w.dtype == torch.float32 and (b is None or b.dtype == torch.float32)

    def _weight_packable(self) -> bool:
        w, b = self.weight, self.bias
        return (w.device.type == "cpu" and w.dtype == torch.float32 and w.numel() > 0
                and (b is None or b.dtype == torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.bias
        if self._released:  # the pack is all there is (release_packed_weights): any input goes through it
            out = _quiet_once(torch.fbgemm_linear_fp16_weight, x.float(), self._packed,
                              b.float() if b is not None else self._zero_bias)
            return out.to(x.dtype)
        if not self._packs_for(x):
            return F.linear(x, self.weight, self.bias)
        return _quiet_once(torch.fbgemm_linear_fp16_weight, x, self._pack(), b if b is not None else self._zero_bias)


def prepack(model: torch.nn.Module, *, half: bool = False, fuse: bool = True) -> int:
    """Turn every `nn.Linear` of `model` into a `PackedLinear` (`half`: a `HalfPackedLinear`) in place (parameters
    untouched); returns how many. `fuse`: a Llama / Qwen2 model's q/k/v and gate/up projections are multiplied as
    one stacked pack each where their kernel packs alone (pack_groups.py)."""
    cls = HalfPackedLinear if half else PackedLinear
    n = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = cls
            n += 1
    if fuse and not half and type(model).__name__ in ARCHITECTURES:
        group_siblings(model)
    return n


def group_siblings(model: torch.nn.Module, siblings=SIBLINGS) -> int:
    """Group each set of `siblings` (attribute names of one parent module) that are `PackedLinear`s packing alone
    with the same input width, dtype and bias presence; returns how many groups were made."""
    n = 0
    for parent in model.modules():
        for names in siblings:
            members = [getattr(parent, name, None) for name in names]
            if not all(type(m) is PackedLinear and m._group is None for m in members):
                continue
            if not all(m.packs_alone() for m in members):  # MKL's product reads the weight: nothing to stack
                continue
            first = members[0]
            if any(m.in_features != first.in_features or m.weight.dtype != first.weight.dtype
                   or (m.bias is None) != (first.bias is None) for m in members):
                continue
            group = PackGroup(members, first._make_pack)
            for m in members:
                m._group = group
            n += 1
    return n


def pack_all(model: torch.nn.Module) -> int:
    """Pack every packable `PackedLinear` of `model` now (after a weight sync) instead of each at its first product,
    so that `release_packed_weights` can follow. One layer after another on the calling thread: packing on a pool of
    threads was faster (fbgemm's float16 packing of SmolLM2-135M's 211 layers: 2.25 s on one thread, 1.55-1.79 s on
    two) but each thread's allocations stay in its own glibc arena, which the learner's memory cannot reuse: the
    run's peak RSS went from 3.8 to 4.8-5.3 GB. Returns how many."""
    layers = [m for m in model.modules() if isinstance(m, PackedLinear) and m._weight_packable()]
    for m in layers:
        m._pack()
    return len(layers)


def pack_only_layers(model: torch.nn.Module) -> dict[str, PackedLinear]:
    """The `PackedLinear`s of `model` that keep their pack alone, by their weight's state-dict name: those that
    `packs_alone` and whose weight no other module shares (a tied head's is the embedding's, which stays)."""
    uses: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        uses[id(p)] = uses.get(id(p), 0) + 1
    return {f"{name}.weight" if name else "weight": m for name, m in model.named_modules()
            if isinstance(m, PackedLinear) and m.packs_alone() and uses[id(m.weight)] == 1}


def release_packed_weights(model: torch.nn.Module) -> int:
    """Free the weight of every packed layer of `model` that keeps its pack alone (`pack_only_layers`: oneDNN's
    and fbgemm's packs are all their products read), so a rollout holds the packs, not the weights too (fbgemm
    pads a float16 pack to blocks of 512 input rows: ~1.8x the float16 bytes at width 576). A weight sync packs
    such a layer straight from the incoming state (`PackedLinear.pack_from`, `TorchEngine.load_weights`); the
    state dict holds empty tensors meanwhile. Returns how many."""
    n = 0
    for m in pack_only_layers(model).values():
        if m._packed is not None and m.weight.numel():
            m.weight.data = torch.empty(0, dtype=m.weight.dtype, device=m.weight.device)
            n += 1
    return n


def drop_packs(model: torch.nn.Module) -> None:
    """Free every packed copy (rebuilt at the next forward)."""
    for module in model.modules():
        if isinstance(module, PackedLinear):
            module._packed = module._packed_key = None
            if module._group is not None:
                module._group.drop()

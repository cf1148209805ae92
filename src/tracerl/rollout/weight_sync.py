"""Weight sync by version: the learner's weights to every rollout worker, in buckets (`rollout.sync_bucket_mb`).

`payload(model, version, bucket_mb)` cuts the policy's plain weights (`models/weights.py`) into buckets of at
most `bucket_mb` MiB, each the bytes of a `torch.save`d dict of CPU tensors, and tags them with the version. A
LoRA policy sends only its adapters after the first sync (`kind="lora"`: each adapted layer's A, B, scaling;
the worker keeps the base weights it received first and merges W + scaling·B·A as peft's delta does), so a
sync moves the adapter's megabytes, not the model's. Transports (who moves the bytes, `rollout.weight_sync`):
a spawned process's queue, the Ray object store (`rollout/ray_worker.py`: each bucket `ray.put` once, every
actor reading the same object), or a `torch.distributed` broadcast (`rollout/broadcast_sync.py`: the same
buckets' tensors, flattened per dtype, sent once to a group of the sender and every worker). `SyncMeter` records each sync's seconds and
megabytes for the metrics `rollout/weight_sync_s` and `rollout/weight_sync_mb`.
"""

from __future__ import annotations

import dataclasses
import io
import time

import torch


@dataclasses.dataclass
class WeightsPayload:
    """One version of the weights in buckets: bytes, or (on Ray) object refs of those bytes."""

    version: int
    buckets: list
    kind: str = "full"  # "full": plain weights; "lora": adapters of the layers named, merged by the worker
    nbytes: int = 0
    aliases: dict = dataclasses.field(default_factory=dict)  # key -> the key whose tensor it shares (tied weights)

    @property
    def mb(self) -> float:
        return self.nbytes / 2**20


def _groups(tensors: dict[str, torch.Tensor], bucket_mb: float) -> list[dict[str, torch.Tensor]]:
    """`tensors` cut in order into buckets of at most `bucket_mb` MiB (a larger tensor alone in its bucket)."""
    cap, out, cur, size = bucket_mb * 2**20, [], {}, 0
    for k, v in tensors.items():
        n = v.numel() * v.element_size()
        if cur and size + n > cap:
            out.append(cur)
            cur, size = {}, 0
        cur[k], size = v, size + n
    if cur or not out:
        out.append(cur)
    return out


def _bucketed(tensors: dict[str, torch.Tensor], bucket_mb: float) -> list[bytes]:
    blobs = []
    for b in _groups(tensors, bucket_mb):
        buf = io.BytesIO()
        torch.save(b, buf)
        blobs.append(buf.getvalue())
    return blobs


def _adapters(model) -> dict[str, torch.Tensor]:
    """Each adapted layer's active adapters as `name.A.i`, `name.B.i`, `name.s.i` (scaling) and `name.t`
    (fan_in_fan_out), CPU copies; plus every other trainable tensor under its plain key."""
    from peft.tuners.lora import LoraLayer

    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, mod in model.named_modules():
            if not isinstance(mod, LoraLayer) or mod.merged or mod.disable_adapters:
                continue
            for i, a in enumerate(x for x in mod.active_adapters if x in mod.lora_A):
                out[f"{name}.A.{i}"] = mod.lora_A[a].weight.detach().to("cpu", copy=True)
                out[f"{name}.B.{i}"] = mod.lora_B[a].weight.detach().to("cpu", copy=True)
                out[f"{name}.s.{i}"] = torch.tensor(float(mod.scaling[a]), dtype=torch.float64)
            out[f"{name}.t"] = torch.tensor(bool(mod.fan_in_fan_out))
    return out


LORA = "lora::"  # a full payload's adapter keys (a LoRA policy: the base weights unmerged, its adapters beside)


def _base_state_dict(model) -> dict[str, torch.Tensor]:
    """A LoRA policy's base weights under the plain architecture's keys, adapters not merged in."""
    out = {}
    for key, value in model.state_dict().items():
        parts = key.split(".")
        if not any(p.startswith("lora_") for p in parts):
            out[".".join(p for p in parts if p != "base_layer")] = value.detach()
    return out


def sync_tensors(model, *, adapters_only: bool = False) -> tuple[dict[str, torch.Tensor], str, dict[str, str]]:
    """What one sync sends, whatever the transport: (CPU tensors by key, kind, aliases); a tied tensor once.
    A LoRA policy's full sync carries the base weights unmerged and its adapters (keys `lora::…`): the worker
    merges them, and keeps the base for later adapter-only syncs (a worker that joins after training began,
    a replaced one, would otherwise merge the adapters twice)."""
    from tracerl.models import lora
    from tracerl.models.weights import plain_state_dict

    aliases: dict[str, str] = {}
    if adapters_only:
        return _adapters(model), "lora", aliases
    adapted = lora.is_lora(model) and any(p.startswith("base_layer") for k in model.state_dict() for p in k.split("."))
    tensors, seen = {}, {}
    for k, v in (_base_state_dict(model) if adapted else plain_state_dict(model)).items():
        key = (v.data_ptr(), v.shape, v.stride(), v.dtype)  # a tied tensor (lm_head = embeddings) travels once
        if key in seen:
            aliases[k] = seen[key]
        else:
            seen[key], tensors[k] = k, v.to("cpu", copy=True)
    if adapted:
        tensors |= {LORA + k: v for k, v in _adapters(model).items()}
    return tensors, "full", aliases


def payload(model, version: int, bucket_mb: float, *, adapters_only: bool = False) -> WeightsPayload:
    """The policy's weights as `version` in buckets; `adapters_only` (a LoRA policy after its first sync):
    only the adapters."""
    tensors, kind, aliases = sync_tensors(model, adapters_only=adapters_only)
    blobs = _bucketed(tensors, bucket_mb)
    return WeightsPayload(int(version), blobs, kind, sum(len(b) for b in blobs), aliases)


def _load(blob) -> dict[str, torch.Tensor]:
    if isinstance(blob, dict):  # tensors already (a broadcast bucket, rollout/broadcast_sync.py)
        return blob
    return torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")


def merged_from_adapters(base: dict[str, torch.Tensor], adapters: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{layer.weight: W + Σ transpose(B·A)·scaling} for each layer in `adapters`, as `lora.merged_weights`
    computes it from the base weights `base` (plain keys)."""
    out = {}
    layers = {k[: -len(".t")] for k in adapters if k.endswith(".t")}
    for name in layers:
        w = base[f"{name}.weight"]
        fan = bool(adapters[f"{name}.t"])
        i = 0
        while f"{name}.A.{i}" in adapters:
            a, b = adapters[f"{name}.A.{i}"].to(w.device), adapters[f"{name}.B.{i}"].to(w.device)
            delta = b @ a
            delta = (delta.T if fan else delta) * float(adapters[f"{name}.s.{i}"])
            w = w + delta.to(w.dtype)
            i += 1
        out[f"{name}.weight"] = w
    return out


class Receiver:
    """A worker's side of the sync: loads full payloads into its model, keeps their adapted layers' base
    weights, and merges adapter-only payloads onto them."""

    def __init__(self):
        self.base: dict[str, torch.Tensor] = {}

    def state(self, p: WeightsPayload, fetch=lambda b: b) -> dict[str, torch.Tensor]:
        """The tensors `p` sets, under plain keys (`fetch` turns a bucket into bytes: `ray.get` on Ray)."""
        tensors: dict[str, torch.Tensor] = {}
        for b in p.buckets:
            tensors |= _load(fetch(b))
        for k, src in p.aliases.items():
            tensors[k] = tensors[src]
        if p.kind == "full":
            adapters = {k[len(LORA):]: tensors.pop(k) for k in [k for k in tensors if k.startswith(LORA)]}
            self.base = {k: v for k, v in tensors.items() if k.endswith(".weight")}
            return tensors | merged_from_adapters(self.base, adapters) if adapters else tensors
        if not self.base:
            raise RuntimeError("an adapter-only weight sync reached a worker that never received full weights")
        return merged_from_adapters(self.base, tensors)

    def load(self, model, p: WeightsPayload, fetch=lambda b: b) -> None:
        state = self.state(p, fetch)
        missing = model.load_state_dict(state, strict=p.kind == "full")
        if p.kind != "full" and missing.unexpected_keys:
            raise RuntimeError(f"adapter sync names layers the worker does not have: {missing.unexpected_keys[:3]}")


class SyncMeter:
    """Seconds and MiB of the weight syncs since the last `take` (metrics `rollout/weight_sync_*`)."""

    def __init__(self):
        self.s = self.mb = 0.0
        self.n = 0

    def timed(self, fn, mb: float):
        t0 = time.perf_counter()
        out = fn()
        self.s += time.perf_counter() - t0
        self.mb += mb
        self.n += 1
        return out

    def take(self) -> dict[str, float]:
        if not self.n:
            return {}
        out = {"rollout/weight_sync_s": self.s, "rollout/weight_sync_mb": self.mb, "rollout/weight_syncs": float(self.n)}
        self.s = self.mb = 0.0
        self.n = 0
        return out

"""The recipe's `engine:` section: which rollout engine samples the policy (docs/engines.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg

_VLLM_ONLY = ("gpu_memory_utilization", "max_model_len", "enforce_eager")


class EngineConfig(Cfg):
    name: Literal["torch", "hf", "vllm"] = "torch"
    """`torch`: the built-in KV-cache engine on the learner's own module (a weight sync is a version bump);
    `hf`: Hugging Face `model.generate` on a copy of the weights, synced after every update; `vllm`: an
    in-process `vllm.LLM` (GPU only, `pip install 'tracerl[vllm]'`), synced by version without a restart."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """dtype of the engine's own copy of the weights; null: the learner's dtype (`model.dtype`). `torch`:
    another dtype than the learner's gives the engine a plain copy of its own in that dtype, refreshed at every
    weight sync (e.g. an fp32 learner sampling from bfloat16 weights: half the bytes read per decode step);
    the learner's dtype keeps the shared module. A copy in another dtype samples a slightly different policy,
    which the behaviour log-probs record and the engine probe (`gates.probe_logprob_diff_max`) measures."""
    prepack: bool | Literal["float16"] = False
    """`torch` on a CPU: sample from a copy of the weights of its own (in `dtype`, or the learner's) whose linear
    layers keep their weights pre-packed in the matmul library's blocked layout (float32: MKL on an Intel CPU
    with AVX-512, oneDNN elsewhere; bfloat16: oneDNN; models/prepack.py), packed again after every weight sync
    and freed while the learner updates: a decode step's matmuls 1.15-1.5× faster at 8-32 rows on SmolLM2-135M
    (one thread, AVX-512 Intel host, MKL), 2.0× at 16 rows on two threads of AMD EPYC hosts (oneDNN; AVX2 and
    AVX-512). The same policy up to float rounding (the engine probe measures it). Costs the packs' memory during
    rollouts (oneDNN's packs replace the copy's linear weights, packed straight from the learner's at each sync).
    A Llama / Qwen2 block's q/k/v and gate/up projections share one stacked oneDNN pack each (models/pack_groups.py:
    each projection's product bit for bit its own; decode 1.09-1.30x the unstacked packs on SmolLM2, two threads).
    `float16`: a float32 copy whose linear weights are packed in half precision for fbgemm's fp16-weight GEMM
    (x86 with AVX2; float32 activations and sums): half the bytes per product, the matmuls of a decode step 2.1x
    faster at 16 rows and 3.8x at 4 on an AVX2 host without bfloat16 kernels (docs/performance_smollm2.md).
    Packed at every sync (1.75-2.3 s for SmolLM2-135M), after which the copy's float32 linear weights are freed.
    The weights are rounded to float16, which the behaviour log-probs record and the probe measures (SmolLM2
    after two updates: |Δ log-prob| up to 0.56): set gates.probe_logprob_diff_max."""
    threads: int | None = Field(None, ge=1, le=256)
    """`torch`: torch's intra-op threads while the engine samples (prefill and decode; the learner keeps
    `run.threads`); null: `run.threads`. A decode step is ~1,500 small operations, each a parallel region that wakes
    the pool's sleeping threads (`OMP_WAIT_POLICY=PASSIVE`): on SmolLM2 with bfloat16 weights, 16 rows, one thread
    decoded faster than two here (90-102 against 105-108 ms a step, docs/performance_smollm2.md), while the
    learner's larger products still gain from two. A rollout worker samples with it too."""
    lean_decode: bool | None = None
    """`torch`: decode steps through the model's own modules instead of its Hugging Face forward
    (rollout/lean_decode.py): the same arithmetic in the same order, so the same logits bit for bit, without the
    forward's Python and small operations around it (SmolLM2-135M, 16 rows: a step 1.02x shorter on an AVX2 host,
    the prototype 1.16x on an AVX-512 one; the default run 586 -> 534 s, docs/performance_smollm2.md). Llama-
    architecture models (Llama, SmolLM2, Qwen2, the tiny model) with sdpa attention; null: wherever it applies,
    the HF forward elsewhere; true: refused where it does not apply; false: always the HF forward."""
    gpu_memory_utilization: float = Field(0.35, gt=0.0, le=0.95)
    """`vllm`: share of the GPU's memory vLLM may take (weights + KV cache); the learner needs the rest."""
    max_model_len: int | None = Field(None, ge=16)
    """`vllm`: the longest sequence (prompt + completion) it serves; null: `env.max_tokens`."""
    enforce_eager: bool = False
    """`vllm`: no CUDA graphs (slower decoding, faster start-up and less memory)."""

    @model_validator(mode="after")
    def _keys_of_the_engine(self) -> EngineConfig:
        for key in ("prepack", "threads", "lean_decode"):
            if getattr(self, key) not in (None, False) and self.name != "torch":
                raise ValueError(f"engine.{key} applies to engine.name torch (the built-in engine), not {self.name}; "
                                 f"unset engine.{key} or set engine.name=torch")
        if self.prepack == "float16" and self.dtype not in (None, "float32"):
            raise ValueError(f"engine.prepack float16 packs a float32 copy's linear weights in half precision and "
                             f"engine.dtype is {self.dtype}; unset engine.dtype or set engine.prepack=true")
        if self.name != "vllm":
            # by value, not by "was it set": a resolved config (config.yaml) round-trips
            set_here = [k for k in _VLLM_ONLY if getattr(self, k) != type(self).model_fields[k].default]
            if set_here:
                raise ValueError(f"engine.{set_here[0]} applies to engine.name vllm only; unset it or set engine.name=vllm")
        return self
